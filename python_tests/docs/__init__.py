"""The README and docs hold together: links, API reference, the README's code blocks."""
