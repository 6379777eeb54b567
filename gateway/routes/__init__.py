"""HTTP routes, one module per endpoint family; each exposes an ``APIRouter`` named ``router``."""
