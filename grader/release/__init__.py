"""The student bundle (``make release``): release.py builds and checks it; templates/ holds its Makefile and
README."""
