"""The inbox's static files, served by api.http.routers.inbox: index.html, inbox.css and
the JavaScript modules (inbox.js, the entry, imports the others)."""
