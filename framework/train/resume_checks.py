"""Checks that keep ``mindexp resume`` from building on a bad record.

- A CSV damaged in the middle (not just a cut last row, which the writer
  repairs) is refused naming the file and line: resuming would cut it back
  or append to a record nobody can read.
- A diverged run resumed with the very config that made it diverge does it
  again: refused unless some config value changes.
- A checkpoints/, plots/ or figures/ that is a link out of the run folder
  is refused: resume's checkpoint retention deletes files there and its
  plots and figures are written there, which would touch files outside.
- (Checkpoints saved after a divergence hold non-finite weights: the chooser,
  ``rundir.checkpoints``, skips them.)
"""
from typing import Any, Mapping
import os

from ..callbacks import schema
from ..errors import MindexpError


class DamagedLogError(MindexpError):
    """A run's CSV log cannot be read back (names the file and line)."""


def check_own_folders(run_dir: str) -> None:
    """MindexpError (one line naming the link) when a folder resume deletes
    from or writes into is a link out of the run folder (rundir.io.linked_out)."""
    from ..rundir.io import linked_out
    why = linked_out(run_dir)
    if why:
        raise MindexpError(f"cannot resume {run_dir}: {why}; mindexp never deletes or writes "
                           "through such a link: replace it with a folder of the run "
                           "(move its files in). Nothing was changed")


def check_logs_readable(run_dir: str, logs: Mapping[str, str | None]) -> None:
    """DamagedLogError naming the first damaged line of a log resume cuts back
    (``logs``: ``{name in the run folder: step column}``, the run's registry;
    a log with no step column is left alone and not read): a line whose field
    count differs from the header's (the callbacks' :class:`CsvFormatError`),
    or a number column holding something else. A known log's number columns
    are all of its columns but the text ones (``schema.TEXT_COLUMNS``); a
    user's log may hold text, so only its step column must be a number."""
    from ..callbacks import CsvFormatError, read_csv
    for name, step_column in sorted(logs.items()):
        if step_column is None:
            continue
        path = os.path.join(run_dir, name)
        try:
            frame = read_csv(path)
        except CsvFormatError as exc:
            _refuse(name, exc.line, exc.problem)
        except UnicodeDecodeError:
            _refuse(name, "?", "not UTF-8 text")
        except schema.NotAFileError as exc:  # a FIFO, folder or link in the log's place
            raise DamagedLogError(f"cannot resume: {exc}; remove it, or put the run's "
                                  f"{name} back") from None
        if len(frame):
            known = schema.log_of_file(name) is not None
            _check_numbers(path, name, frame, None if known else (step_column,))


def _check_numbers(path: str, name: str, frame: Any,
                   columns: tuple[str, ...] | None = None) -> None:
    """Refuse the first value of a number column that is not a number
    (``columns``: those to check, by default every column but the text ones)."""
    with schema.open_file(path) as f:
        cut_tail = not f.read().endswith(b"\n")  # a cut last row: the writer repairs it
    rows = frame.iloc[:-1] if cut_tail else frame
    for column in rows.columns:
        if columns is not None and column not in columns:
            continue
        if column in schema.TEXT_COLUMNS or rows[column].dtype.kind in "iufb":
            continue
        values = rows[column]
        bad = values.notna() & ~values.map(_is_number)
        if bad.any():
            row = int(bad.to_numpy().argmax())
            _refuse(name, row + 2, f"{column}={values.iloc[row]!r} is not a number")


def _is_number(value: Any) -> bool:
    try:
        float(value)  # "nan" and "inf" too: a diverged run logs them
    except (TypeError, ValueError):
        return False
    return True


def _refuse(name: str, line: int | str, why: str) -> None:
    raise DamagedLogError(f"{name} line {line} is damaged ({why}); repair or delete that line "
                          f"and every line after it, then resume again") from None


def check_not_diverged_again(run_dir: str, meta: dict[str, Any], old_config: dict[str, Any],
                             new_config: dict[str, Any]) -> None:
    """A diverged run resumes only when the user changed some config value
    (``old_config``/``new_config``: the resolved config dicts)."""
    if meta.get("status") != "diverged" or old_config != new_config:
        return
    lr = f" (now lr={old_config['lr']})" if "lr" in old_config else ""
    why = (meta.get("error") or "diverged").removeprefix("diverged: ")
    raise MindexpError(f"cannot resume {run_dir}: it diverged ({why}) and the same config "
                       f"diverges again; change what caused it, e.g. --set lr=<smaller>{lr}")
