"""The training process's log: ``jobs/<id>/train.log`` is its stderr (the fork server or the cold
launcher points it there). What a user needs to read goes in: the core's start and epoch lines,
warnings from the libraries (``warnings`` and transformers' own logger), a failure's traceback."""

from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_job_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)  # libraries: warnings and worse
    for ours in ("trainer_core", "worker"):
        logging.getLogger(ours).setLevel(logging.INFO)
    logging.captureWarnings(True)  # warnings.warn(...) -> the "py.warnings" logger -> here
    # transformers keeps its own stderr handler; send its records through ours instead, so
    # they carry the same time stamps (imported here: the child loads it to train anyway).
    from datasets.utils import logging as datasets_logging
    from transformers.utils import logging as hf_logging

    hf_logging.disable_default_handler()
    hf_logging.enable_propagation()
    # Progress bars are terminal animations: in a file they are noise ("Generating train split").
    datasets_logging.disable_progress_bar()
