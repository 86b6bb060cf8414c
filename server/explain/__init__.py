"""The one place where tensors and token ids become the pydantic models of server.schemas.

One data function per view; the JSON endpoint and the HTML page both call it.
"""
