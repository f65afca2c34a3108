"""The tool's version, in the base layer: what reports, check output, SARIF and the result cache's key name.

`analyzer.__version__` re-exports it; modules inside the package import it from here (never from the top
package `analyzer`, which sits above every layer; docs/analysis.md, "Layers"). pyproject.toml states the same
version for the distribution.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
