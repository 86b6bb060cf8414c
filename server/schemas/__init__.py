"""The JSON contract of /api/v1, one module per area. Every response is one of these models."""
