"""The package version: the one place it is written (pyproject.toml reads it
as a dynamic attribute; ``kokoro_lstm.__version__`` and ``kokoro-lstm --version``
import it)."""
__version__ = "0.1.0"
