"""Who makes a request (docs/security.md, "Identity"): the people of ``local`` mode and
their keys (``people_store``), the authenticators that turn a request's credentials
into a :class:`workflows.people.Principal` (``principals``), and roles from groups
(``roles``). Used by the HTTP doors, the command line (``hitlflow people``) and ``up``.
"""
