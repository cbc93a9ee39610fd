"""The inbox's static files (index.html, inbox.js, inbox.css), served by api.http.routers.inbox."""
