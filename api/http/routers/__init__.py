"""The HTTP service's routers, one per resource."""
