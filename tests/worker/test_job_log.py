"""train.log gets what a user needs: our INFO lines, library warnings (``warnings`` and
transformers' logger) and a failure's traceback, in the training process's configuration."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

SCRIPT = """
import logging, warnings
from worker.child.logs import configure_job_logging
configure_job_logging()
logging.getLogger("trainer_core.train").info("start: the start line")
logging.getLogger("sqlalchemy.engine").info("library chatter below WARNING")
warnings.warn("a library's warning")
from transformers.utils import logging as hf_logging
hf_logging.get_logger("transformers.modeling_utils").warning("a transformers warning")
try:
    1 / 0
except ZeroDivisionError:
    logging.getLogger("worker.child.entry").exception("job x crashed")
"""


def test_the_job_log_holds_lines_warnings_and_tracebacks() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    log = done.stderr
    assert "INFO trainer_core.train: start: the start line" in log
    assert "WARNING py.warnings" in log and "a library's warning" in log
    assert "a transformers warning" in log
    assert "ERROR worker.child.entry: job x crashed" in log and "ZeroDivisionError" in log
    assert "library chatter" not in log
