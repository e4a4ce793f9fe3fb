"""The command line and its glue: ``structnmt <command>`` (:mod:`.commands`), and the few commands whose glue
is more than argument parsing (:mod:`.training`, :mod:`.demo`, :mod:`.store_features`,
:mod:`.compare_attention`). The top layer: nothing below it imports from here."""

from .commands import main

__all__ = ["main"]
