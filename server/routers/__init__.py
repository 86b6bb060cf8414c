"""One APIRouter per area. JSON routers live under /api/v1; `pages` serves the HTML shells."""
