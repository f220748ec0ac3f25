"""Kubernetes: the only code that calls the Kubernetes API.

``api`` (the one seam: timeouts, merge patches, counted requests, the RBAC permissions), ``isolation``
(cordon + taint of implicated nodes and its undo), ``workload`` (what the workload adapters share),
``jobset`` and ``pytorchjob`` (the adapters).
"""
