"""gptscope's web side: FastAPI app, /api/v1 routers, pydantic schemas, the explain layer, CLI.

Data flows one way:  model/ (torch)  ->  server/explain/ (tensors -> pydantic)  ->
server/schemas/ (the JSON contract)  ->  server/routers/ (/api/v1 and the pages)  ->  static/ panels.
"""

__version__ = "0.1.0"
