"""Event files through TensorBoard's own writer and protos.

The ``tensorboard`` package alone (the ``tensorboard`` extra) writes them:
``EventFileWriter`` and the ``Summary``/hparams protos need neither
TensorFlow nor torch, and TensorBoard reads back exactly what it wrote.
Imported lazily: nothing here is loaded until a writer is made.
"""
from __future__ import annotations

import numbers
import os
import time
from typing import Any, Iterable, Mapping

EXTRA_HINT = "pip install 'mindexp[tensorboard]'"


def _modules() -> tuple[Any, ...]:
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError:
        raise ImportError(f"TensorBoard event files need the tensorboard package: {EXTRA_HINT}"
                          ) from None
    return event_pb2, summary_pb2, api_pb2, metadata, plugin_data_pb2, EventFileWriter


def check_available() -> None:
    """ImportError naming the extra when tensorboard is missing."""
    _modules()


class EventWriter:
    """Scalars and hparams into one run's event file (``directory`` is the run's logdir)."""

    def __init__(self, directory: str | os.PathLike[str], flush_secs: float = 5) -> None:
        (self._event_pb2, self._summary_pb2, self._api_pb2, self._metadata,
         self._plugin_pb2, writer) = _modules()
        self._writer = writer(str(directory), flush_secs=flush_secs)

    def scalar(self, tag: str, value: object, step: int, wall_time: float | None = None) -> None:
        """One scalar; a None or non-number value is skipped (a NaN is kept: it is data)."""
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            return
        summary = self._summary_pb2.Summary(
            value=[self._summary_pb2.Summary.Value(tag=tag, simple_value=float(value))])
        self._add(summary, step, wall_time)

    def image(self, tag: str, png: bytes, step: int, wall_time: float | None = None) -> None:
        """One PNG picture (TensorBoard's Images tab); a file that is not a PNG is skipped."""
        size = png_size(png)
        if size is None:
            return
        width, height, channels = size
        image = self._summary_pb2.Summary.Image(height=height, width=width, colorspace=channels,
                                                encoded_image_string=png)
        summary = self._summary_pb2.Summary(
            value=[self._summary_pb2.Summary.Value(tag=tag, image=image)])
        self._add(summary, step, wall_time)

    def hparams(self, values: Mapping[str, Any], metrics: Iterable[str], step: int = 0) -> None:
        """The hparams plugin's experiment and session start for this run:
        ``values`` (name -> bool, number or text) and the metric tags it shows.

        Each field is marked ``differs``: TensorBoard lists differing fields first
        and then by name, and its dashboards show the first few only; the fields
        written here are the ones chosen to be seen."""
        api, plugin = self._api_pb2, self._plugin_pb2
        start = plugin.SessionStartInfo()
        infos = []
        for name, value in values.items():
            if isinstance(value, bool):
                start.hparams[name].bool_value = value
                kind = "DATA_TYPE_BOOL"
            elif isinstance(value, numbers.Real):
                start.hparams[name].number_value = float(value)
                kind = "DATA_TYPE_FLOAT64"
            else:
                start.hparams[name].string_value = "none" if value is None else str(value)
                kind = "DATA_TYPE_STRING"
            infos.append(api.HParamInfo(name=name, type=api.DataType.Value(kind), differs=True))
        experiment = api.Experiment(hparam_infos=infos, metric_infos=[
            api.MetricInfo(name=api.MetricName(tag=tag)) for tag in metrics])
        self._plugin_summary(self._metadata.EXPERIMENT_TAG,
                             plugin.HParamsPluginData(experiment=experiment), step)
        self._plugin_summary(self._metadata.SESSION_START_INFO_TAG,
                             plugin.HParamsPluginData(session_start_info=start), step)

    def session_end(self, ok: bool, step: int) -> None:
        """The hparams plugin's session end (success or failure)."""
        status = self._api_pb2.Status.Value("STATUS_SUCCESS" if ok else "STATUS_FAILURE")
        info = self._plugin_pb2.SessionEndInfo(status=status)
        self._plugin_summary(self._metadata.SESSION_END_INFO_TAG,
                             self._plugin_pb2.HParamsPluginData(session_end_info=info), step)

    def flush(self) -> None:
        """Hand the events written so far to the file."""
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()

    def _plugin_summary(self, tag: str, data: Any, step: int) -> None:
        data.version = self._metadata.PLUGIN_DATA_VERSION
        summary_pb2 = self._summary_pb2
        meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=self._metadata.PLUGIN_NAME, content=data.SerializeToString()))
        self._add(summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, metadata=meta)]),
                  step, None)

    def _add(self, summary: Any, step: int, wall_time: float | None) -> None:
        event = self._event_pb2.Event(wall_time=time.time() if wall_time is None else wall_time,
                                      step=int(step), summary=summary)
        self._writer.add_event(event)


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}  # IHDR colour type -> channels (3: palette)


def png_size(png: bytes) -> tuple[int, int, int] | None:
    """``(width, height, channels)`` from a PNG's IHDR chunk; None when not a PNG."""
    if len(png) < 26 or not png.startswith(_PNG_SIGNATURE) or png[12:16] != b"IHDR":
        return None
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    return width, height, _PNG_CHANNELS.get(png[25], 4)
