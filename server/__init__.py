"""gptscope's web side, installed as `gptscope.server`: FastAPI app, /api/v1 routers, pydantic
schemas, the explain layer, CLI.

Data flows one way:  gptscope.model (torch)  ->  server/explain/ (tensors -> pydantic)  ->
server/schemas/ (the JSON contract)  ->  server/routers/ (/api/v1 and the pages)  ->  static/ panels.
"""
