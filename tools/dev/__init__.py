"""Developer tools: the in-place build, ``make bench``, and the mkdocs hooks."""
