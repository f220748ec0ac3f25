"""HTML templates of the console (``responder/console.py``); values are escaped before substitution."""
