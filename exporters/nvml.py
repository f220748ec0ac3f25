"""GPU faults through NVML (nvidia-ml-py, import name ``pynvml``; the optional extra ``trainguard[nvml]``).

XID events arrive through an NVML event set, waited on by one background thread of the exporter (never
of training code). ECC, row-remap and NVLink state are read at scrape time. Without NVML (no package, no
driver, no GPU) the collector is off after one clear log line and emits only ``trainguard_nvml_up 0``.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any, Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from exporters.state import IDENTITY_LABELS, Identity
from exporters.tokens import pci_bus_id

log = logging.getLogger("trainguard.exporter")

XID_CRITICAL_EVENT: Final = 0x8
MAX_NVLINKS: Final = 18
# NVML's nvmlNvLinkErrorCounter_t values, used when the module lacks the constants
_NVLINK_COUNTERS: Final = (
    ("replay", "NVML_NVLINK_ERROR_DL_REPLAY", 0),
    ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY", 1),
    ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT", 2),
    ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA", 3),
)


def pci_to_gpu(nv: Any, handles: Iterable[tuple[str, Any]]) -> dict[str, str]:
    """PCI bus id (normalised as ``exporters.tokens.pci_bus_id`` writes it) -> GPU index, for log tokens."""
    out: dict[str, str] = {}
    for gpu, handle in handles:
        try:
            bus = nv.nvmlDeviceGetPciInfo(handle).busId
        except Exception:  # noqa: BLE001, S112 - a GPU without PCI info just has no mapping
            continue
        pci = pci_bus_id(bus.decode() if isinstance(bus, bytes) else str(bus))
        if pci is not None:
            out[pci] = gpu
    return out


def nvml_pci_map() -> dict[str, str]:
    """The local GPUs' PCI -> index map through NVML, or {} where NVML does not run (no package, no GPU)."""
    try:
        nv = importlib.import_module("pynvml")
        nv.nvmlInit()
    except Exception:  # noqa: BLE001 - ImportError, NVMLError (no driver): no mapping, no noise
        return {}
    try:
        count = nv.nvmlDeviceGetCount()
        return pci_to_gpu(nv, [(str(i), nv.nvmlDeviceGetHandleByIndex(i)) for i in range(count)])
    except Exception:  # noqa: BLE001 - as above
        return {}
    finally:
        nv.nvmlShutdown()


def xid_label(xid: int) -> str:
    """The ``xid`` label: the code, bounded (a corrupt value must not make a series per event)."""
    return str(xid) if 0 < xid < 1000 else "other"


class NvmlCollector(Collector):
    def __init__(
        self,
        cluster: str,
        host: str,
        nvml: ModuleType | Any | None = None,
        known_xids: Iterable[int] = (),
        wait_ms: int = 1000,
        identity_for_gpu: Callable[[str, str | None], Identity | None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.host = host
        self._nvml = nvml
        self.known_xids = sorted(set(known_xids))
        self.wait_ms = wait_ms
        self.up = False
        self.identity_for_gpu = identity_for_gpu
        self.gpus: list[tuple[str, Any]] = []  # (index label, handle)
        self.uuids: dict[str, str | None] = {}
        self.pci: dict[str, str] = {}  # PCI bus id -> GPU index
        self.links: dict[str, list[int]] = {}
        # (identity of the rank on the GPU at the time, gpu, xid) -> count
        self.xid_counts: dict[tuple[Identity, str, str], int] = {}
        self.event_errors = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: Any = None

    def start(self) -> bool:
        """Initialise NVML; False (with one log line) when it is not there."""
        nv = self._nvml
        if nv is None:
            try:
                nv = importlib.import_module("pynvml")
            except ImportError:
                log.info("NVML collector off: nvidia-ml-py is not installed (pip install 'trainguard[nvml]')")
                return False
        err = getattr(nv, "NVMLError", Exception)
        try:
            nv.nvmlInit()
            count = nv.nvmlDeviceGetCount()
            self.gpus = [(str(i), nv.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
        except (err, OSError) as exc:
            log.info("NVML collector off: NVML unavailable (%s)", exc)
            return False
        self._nvml = nv
        self.pci = pci_to_gpu(nv, self.gpus)
        for gpu, handle in self.gpus:
            uuid = self._call(nv.nvmlDeviceGetUUID, handle) if hasattr(nv, "nvmlDeviceGetUUID") else None
            self.uuids[gpu] = uuid.decode() if isinstance(uuid, bytes) else uuid
            self.links[gpu] = [
                link for link in range(MAX_NVLINKS) if self._call(nv.nvmlDeviceGetNvLinkState, handle, link) is not None
            ]
            self.precreate(gpu)
        self.up = True
        try:
            es = nv.nvmlEventSetCreate()
            registered = 0
            for _gpu, handle in self.gpus:
                supported = self._call(nv.nvmlDeviceGetSupportedEventTypes, handle) or 0
                if supported & XID_CRITICAL_EVENT:
                    nv.nvmlDeviceRegisterEvents(handle, XID_CRITICAL_EVENT, es)
                    registered += 1
        except err as exc:
            log.warning("NVML XID events unavailable (%s); ECC, row-remap and NVLink still collected", exc)
            return True
        self._event_set = es
        log.info("NVML collector on: %d GPUs, XID events on %d", len(self.gpus), registered)
        self._thread = threading.Thread(target=self._events, name="nvml-events", daemon=True)
        self._thread.start()
        return True

    def _identity(self, gpu: str) -> Identity:
        found = self.identity_for_gpu(gpu, self.uuids.get(gpu)) if self.identity_for_gpu is not None else None
        return found if found is not None else Identity(self.cluster, "", "", "", "", self.host)

    def precreate(self, gpu: str) -> None:
        """Zeros for the catalog's XIDs under the GPU's current identity (increase() sees the first one)."""
        ident = self._identity(gpu)
        with self._lock:
            for xid in self.known_xids:
                self.xid_counts.setdefault((ident, gpu, xid_label(xid)), 0)

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except getattr(self._nvml, "NVMLError", Exception):
            return None

    def _gpu_of(self, device: Any) -> str:
        for gpu, handle in self.gpus:
            if handle == device:
                return gpu
        index = self._call(self._nvml.nvmlDeviceGetIndex, device) if self._nvml is not None else None
        return str(index) if isinstance(index, int) else "unknown"

    def _events(self) -> None:
        nv = self._nvml
        assert nv is not None
        err = getattr(nv, "NVMLError", Exception)
        timeout = getattr(nv, "NVMLError_Timeout", None)
        while not self._stop.is_set():
            try:
                data = nv.nvmlEventSetWait(self._event_set, self.wait_ms)
            except err as exc:
                if timeout is not None and isinstance(exc, timeout):
                    continue
                with self._lock:
                    self.event_errors += 1
                self._stop.wait(1.0)
                continue
            if not int(getattr(data, "eventType", 0)) & XID_CRITICAL_EVENT:
                continue
            gpu = self._gpu_of(data.device)
            key = (self._identity(gpu), gpu, xid_label(int(data.eventData)))
            with self._lock:
                self.xid_counts[key] = self.xid_counts.get(key, 0) + 1

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._nvml is not None and self.up:
            if self._event_set is not None:
                self._call(self._nvml.nvmlEventSetFree, self._event_set)
            self._call(self._nvml.nvmlShutdown)

    def collect(self) -> Iterator[Metric]:
        base = ("cluster", "host")
        up = GaugeMetricFamily("trainguard_nvml_up", "1 when the NVML collector runs.", labels=base)
        up.add_metric([self.cluster, self.host], 1.0 if self.up else 0.0)
        yield up
        if not self.up or self._nvml is None:
            return
        nv = self._nvml
        gpu_labels = (*base, "gpu")
        xid = CounterMetricFamily(
            "trainguard_gpu_xid_errors",
            "XID events seen through NVML, with the identity of the rank that used the GPU.",
            labels=(*IDENTITY_LABELS, "gpu", "xid"),
        )
        with self._lock:
            counts = list(self.xid_counts.items())
        for (ident, gpu, code), n in counts:
            xid.add_metric([*ident, gpu, code], n)
        yield xid
        ecc = CounterMetricFamily(
            "trainguard_gpu_ecc_uncorrected_volatile",
            "Uncorrectable ECC errors since the driver loaded (volatile counter).",
            labels=gpu_labels,
        )
        remapped = CounterMetricFamily(
            "trainguard_gpu_remapped_rows_uncorrectable", "Rows remapped for uncorrectable errors.", labels=gpu_labels
        )
        pending = GaugeMetricFamily(
            "trainguard_gpu_row_remap_pending", "1: a remap waits for a GPU reset.", labels=gpu_labels
        )
        failure = GaugeMetricFamily(
            "trainguard_gpu_row_remap_failure", "1: a row remap failed (RMA).", labels=gpu_labels
        )
        link_up = GaugeMetricFamily(
            "trainguard_gpu_nvlink_up", "1: the NVLink is active.", labels=(*gpu_labels, "link")
        )
        link_err = CounterMetricFamily(
            "trainguard_gpu_nvlink_errors", "NVLink data-link error counters.", labels=(*gpu_labels, "link", "counter")
        )
        uncorrected = getattr(nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
        volatile = getattr(nv, "NVML_VOLATILE_ECC", 0)
        for gpu, handle in self.gpus:
            lv = [self.cluster, self.host, gpu]
            n = self._call(nv.nvmlDeviceGetTotalEccErrors, handle, uncorrected, volatile)
            if isinstance(n, int):
                ecc.add_metric(lv, n)
            rows = self._call(nv.nvmlDeviceGetRemappedRows, handle)
            if isinstance(rows, tuple | list) and len(rows) >= 4:
                remapped.add_metric(lv, int(rows[1]))
                pending.add_metric(lv, 1.0 if rows[2] else 0.0)
                failure.add_metric(lv, 1.0 if rows[3] else 0.0)
            for link in self.links.get(gpu, []):
                state = self._call(nv.nvmlDeviceGetNvLinkState, handle, link)
                if state is not None:
                    link_up.add_metric([*lv, str(link)], 1.0 if state else 0.0)
                for name, const, default in _NVLINK_COUNTERS:
                    v = self._call(nv.nvmlDeviceGetNvLinkErrorCounter, handle, link, getattr(nv, const, default))
                    if isinstance(v, int):
                        link_err.add_metric([*lv, str(link), name], v)
        yield from (xid, ecc, remapped, pending, failure, link_up, link_err)
