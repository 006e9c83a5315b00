"""The ``kokoro-lstm`` command line.

Subcommands::

    kokoro-lstm port-encoder --component {bert,duration,f0n,text_encoder,all} [...]
        compile Kokoro's encoder components with Apache TVM (a drop-in for kokoro-tvm's
        port_encoder.py; see kokoro_lstm.cli.port_encoder)
    kokoro-lstm port-decoder [--seq-len 150 | --seq-lens F1,F2,...] [...]
        compile Kokoro's decoder with Apache TVM, noise drawn at run time (a drop-in
        for kokoro-tvm's port_decoder.py; see kokoro_lstm.cli.port_decoder)
    kokoro-lstm demo [--seq-len 32] [--methods native tir relax] [--output-dir DIR]
        port text_encoder and duration with several LSTM methods (random weights,
        validated) and print one table (see kokoro_lstm.cli.demo)
    kokoro-lstm --version

``python -m kokoro_lstm.cli`` is the same; ``python -m kokoro_lstm.cli.port_encoder``
and ``python -m kokoro_lstm.cli.port_decoder`` take their subcommand's flags directly.
Importing this package imports neither torch nor tvm.
"""
from __future__ import annotations

import sys
from typing import List, Optional

from .._version import __version__

__all__ = ["main"]


def _parser():
    from . import demo, port_decoder, port_encoder

    p = port_encoder._Parser(
        prog="kokoro-lstm",
        description="kokoro_lstm command line: port Kokoro's encoder and decoder to Apache "
                    "TVM.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", metavar="{port-encoder,port-decoder,demo}",
                           parser_class=port_encoder._Parser)
    sub.required = True
    pe = sub.add_parser("port-encoder", help="compile Kokoro encoder components with TVM",
                        description=port_encoder.__doc__.split("\n\n")[0].replace("``", ""))
    port_encoder.add_arguments(pe)
    pe.set_defaults(func=port_encoder.run)
    pd = sub.add_parser("port-decoder", help="compile Kokoro's decoder with TVM",
                        description=port_decoder.__doc__.split("\n\n")[0].replace("``", ""))
    port_decoder.add_arguments(pd)
    pd.set_defaults(func=port_decoder.run)
    dm = sub.add_parser("demo", help="port text_encoder and duration with native/tir/relax "
                                     "and print a table", description=demo.__doc__.split("\n\n")[0].replace("``", ""))
    demo.add_arguments(dm)
    dm.set_defaults(func=demo.run)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``kokoro-lstm`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
