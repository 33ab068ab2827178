"""Group commit: one writer thread per factory does every write and sync of the file ledger.

The loop submits operations (append a record, create / close a segment, replace a small file,
...) and returns at once. The writer thread takes *everything* queued as one batch, performs it
in order - the appends to one segment between two other operations become one ``write``, even
when appends to other segments came in between (several producers: A B A B) - then syncs each
segment it appended to once (fdatasync) and posts the batch's completions back to the loop with one
``call_soon_threadsafe``, in submission order. While it syncs, new submissions pile up and become
the next batch: under load, many appends share one fsync.

Steady streams also wait a little to share a sync (like BookKeeper's journal group commit): each
round costs a fixed few hundred microseconds of CPU (an fdatasync ~200 us on a small VM, and the
thread wake-ups around it) on top of its per-byte work, so a stream synced round by round spends
much of a small machine's CPU on rounds (a batching client's 8 KB batch per millisecond: 5 us of
broker CPU per 100-byte message synced alone, 3.8 grouped; docs/benchmarks.md). When the previous
batch carried at least ``group_min_bytes``, the writer gathers the next batch for up to
``group_wait_s`` (or until ``group_bytes`` are queued) before writing it. In steady state a stream
is grouped exactly when it brings ``group_min_bytes`` within ``group_wait_s`` (4 MB/s by default):
one that slows down ends its own grouping, since a wait that gathers less than the threshold is
followed by no wait. Light traffic (a few messages, a cursor update, 10k unbatched 100-byte
messages a second) never waits, so its latency is a bare write + sync.

Pipelined syncs: a light batch of appends (under ``group_bytes / 8``, to fewer than
``PARALLEL_SYNC_MIN`` segments, nothing but appends) does not wait for the syncs of the batches
before it. The writer writes it at once and hands its fdatasyncs to the sync threads, then takes the
next batch; up to ``PIPELINE_DEPTH`` such rounds have syncs in flight. Except for a grouped stream
(a batch of ``group_min_bytes`` or more, to one segment) while syncs take less than
``group_wait_s``: the writer would only wait for the next batch during that sync, so it syncs the
round itself (in its write: see "Writes that sync") and then gathers. Handing it to a sync thread
costs more CPU than the sync (a thread wake-up and a contended GIL on each side: 345 -> 256 us of
broker CPU per 83-message batch arriving each millisecond, ``bench.send_cycle --batch 83 --per-read
1 --pace-ms 1``), and the stream's batches are only one sync further apart. A slower sync sends the
next rounds back to the sync threads. A sync covers what was written before it started, so each
round is durable when its own syncs return. The thread whose sync completes the oldest round settles
it and posts its completions (rounds settle strictly in order, so completions keep submission
order). Anything else (a heavy batch, many segments, a segment to create or close, a cursor write, a
barrier) first waits until every round in flight has settled, then runs as above. Before this, an
append that arrived during a sync waited for that sync to end before its own write and sync began.

An append completes (successfully) only after the sync of its segment returned: a receipt sent
from its callback is a promise that the record survives a power cut.

Failures: when a write or sync of a segment fails (ENOSPC, EIO), every not-yet-confirmed append
of that owner (managed ledger) fails, and so does every later operation of the owner until a
``recover`` operation succeeds: nothing of a failed owner is confirmed after a failure, so the
confirmed records always form a prefix. (A pipelined round written before the writer learned of
an earlier round's failed sync fails that owner's appends when it settles.) After a failed fsync
the kernel may have dropped the dirty pages (and cleared the error), so the only safe state is
"synced size": ``recover`` truncates the owner's segments back to what the loop knows is confirmed.

Directory entries are grouped too: creating a segment, a topic's directory or a subscription's
cursor file makes a new name that is durable only once its directory is fsynced. Those operations
name the directory (``sync_dir``) instead of syncing it themselves; the writer syncs each directory
named in a batch once, after the batch's operations and before any of its completions is posted
(so nothing is confirmed before its name is durable). When many subscriptions or topics are
created at once, one directory sync covers all the files created in it in that round, and the
distinct directories of a round are synced by a few threads at once, as segments are. A segment
can also be created with no directory sync (``create(sync_dir=False)``: a managed ledger's first
segment on open); its owner then names the directory in an operation queued ahead of the first one
that depends on the name (``run(..., also_sync=...)``), whose failure fences the owner.

Direct writes: segments are written in whole blocks (``fs.BLOCK``, 4 KiB) at their own offsets:
each write is the segment's last partial block again (its bytes are kept in memory), the new
records, and zeros to the end of the block, copied into one block-aligned buffer. When syncing,
segments are opened with O_DIRECT where the file system has it, so the bytes go from that buffer to
the device without page-cache pages to allocate, fill and write back: the writer's CPU per byte was
the page cache's, and direct writes cut it to a sixth at 1 KiB messages (2.0 -> 0.33 us per
message, docs/benchmarks.md). The fdatasync after them still makes the file's size and the device's
cache durable. (PostgreSQL's direct WAL writes rewrite their last partial page the same way; a torn
rewrite cannot hurt the records already in the block, whose bytes it writes unchanged.) Readers
keep the page cache: the kernel drops cached pages a direct write overwrites, and entries that are
not in the read cache are read from the disk. A closed segment is cut back to its last record; one
that a crash or a stop left with zeros after it reads as ending at its last record
(``segment.scan``), and recovery cuts the zeros.

Zeros ahead: a write that grows a segment file also writes zeros after its records, in the same
``pwritev``: as many bytes as the segment already holds, at most ``PREALLOC_MAX``. The appends that
follow overwrite zeros inside the file's size, so their fdatasync has no new size to make durable.
On ext4 a sync that grows the file also commits the file system's journal (another device write,
and the jbd2 thread's wake-up that the writer waits for); one that does not is the data and a
cache flush. The direct write and fdatasync of a 28 KB batch, alone in a loop on this 2-core VM:
99-113 -> 41-50 us of CPU and p50 0.25 -> 0.12 ms per round; in the broker, a batch every 1.7 ms
(``bench.send_cycle --batch 260 --per-read 1 --pace-ms 1.7``, alternating runs): the writer thread's
235-238 -> 192-217 us per SEND. (PostgreSQL zero-fills its WAL segments before use for the same
reason.) The cost is one more write of as many zero bytes, at most ``PREALLOC_MAX`` ahead for each
open segment. The zeros are the segment's end as any block's padding is: closing cuts them, and a
crash or a stop leaves them for the scan on open to read as the end. When the disk has no room for
them, the records are written alone. Without syncs there are none: nothing would be saved.

Writes that sync: where the writer would sync a segment right after writing it (a grouped stream's
round; a batch of nothing but appends to fewer than ``PARALLEL_SYNC_MIN`` segments, whose syncs run
one after another after the writes), the write syncs itself: a direct ``pwritev2`` with
``RWF_DSYNC``, O_DSYNC for that write alone, which returns once its bytes and the file's size are
durable. One system call instead of two, so the writer thread gives the GIL up and takes it back
once per round instead of twice; taking it back is a wait (a futex round trip, two context switches
on this VM) whenever the loop holds it. Measured against the write-then-fdatasync version
(docs/benchmarks.md, 2026-12-07): broker CPU per message on the official client's batched 100 B
produce row, as a ratio to pulsar-lite's in the same round, 1.24 against 1.33 and 1.23 against 1.37
(medians of 6 and 10 alternating rounds), with our absolute CPU per message and ``bench.send_cycle``
unchanged within this machine's noise: a few per cent at most (an earlier try, before the zeros
ahead, measured none). Such a write makes only its own bytes durable (on a device with FUA it is one
FUA write, no cache flush), so it is used only when everything before it in the segment is durable
already (it rewrites the last partial block, so a new segment's header is among its bytes);
otherwise, and on kernels or files without it (buffered writes), the write is followed by an
fdatasync as before. A failure of the sync is the write's failure: the owner fails as after a failed
sync.

``sync=False`` skips the per-append fdatasync (segment creation, cursor and metadata files are
still synced): an append is confirmed once it is in the OS page cache. That survives the broker
process dying (kill -9) but NOT a power cut or kernel crash: receipted messages written in the
last few seconds (the kernel's dirty writeback interval, 5-30 s) can be lost.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import mmap
import posixpath
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

from managed_ledger.api import StorageUnavailableError
from managed_ledger.fs import BLOCK, FileHandle, FileSystem
from managed_ledger.stats import FileLedgerStats

log = logging.getLogger(__name__)

Done = Callable[[BaseException | None], None]
Owner = object  # identifies a managed ledger; None for operations that fence nobody


# Group commit of steady streams: BookKeeper's journalMaxGroupWaitMSec (2 ms there) and
# journalBufferedWritesThreshold (512 KiB).
DEFAULT_GROUP_WAIT_S = 0.001
DEFAULT_GROUP_BYTES = 512 * 1024
# Ours: a batch of at least this many bytes makes the writer gather the next (streams of 4 MB/s and
# more with the default wait are grouped).
DEFAULT_GROUP_MIN_BYTES = 4096
# The writer's block buffer grows in steps of this size (a batch is up to group_bytes, 512 KiB, and more
# when one SEND is larger).
_BUFFER_STEP = 1024 * 1024
_ZERO_BLOCK = bytes(BLOCK)
# Zeros written ahead of a segment's records (see "Zeros ahead" in the module docstring): at most this
# many bytes, and at most as many as the segment already holds.
PREALLOC_MAX = 256 * 1024
# Segment files kept open for appends (see GroupCommitWriter); the factory sizes it from the
# process's file-descriptor limit.
DEFAULT_MAX_OPEN_FILES = 1024
# A batch that appended to at least this many segments syncs them on this many threads at once.
PARALLEL_SYNC_MIN = 4
SYNC_THREADS = 8
# Light rounds (see "Pipelined syncs" in the module docstring): at most this many rounds have their
# syncs in flight at once. Overlapping fdatasyncs of one file share the file system's journal
# commits: at 1k appends/s on a busy 2-core VM this halved the median wait (4-9 ms -> 1.4-2.6 ms).
PIPELINE_DEPTH = 4


def _ignore(exc: BaseException | None) -> None:
    pass


@dataclass(eq=False)
class _Segment:
    """A segment open for appends, as the writer thread sees it."""

    path: str
    handle: FileHandle | None  # None while parked: closed to save a file descriptor
    owner: Owner
    written: int  # where our records end (the next one is written there)
    synced: int  # how much of that is known durable
    syncing: int = 0  # pipelined rounds whose sync of this file is in flight (under the writer's _settle_lock)
    size: int = 0  # the file's size: written, and zeros to the end of its last block
    tail: bytes = b""  # the bytes of the last partial block (the last written % BLOCK)
    # The last write synced itself (see "Writes that sync" in the module docstring): how long it took,
    # for the sync that it replaces; None when the last write needs a sync after it.
    synced_write: float | None = None


@dataclass(eq=False, slots=True)
class _Op:
    kind: str  # "append", "create", "close", "release", "recover", "task"
    owner: Owner | None
    done: Done
    path: str = ""
    data: bytes = b""
    parts: list[bytes] | None = None  # appends: the records, as parts for one gathering write
    nbytes: int = 0  # appends: the total size of parts
    task: Callable[[], None] | None = None
    truncations: tuple[tuple[str, int], ...] = ()
    # Directories to fsync (grouped) once the operation succeeded, before its completion: a task's, or a
    # created segment's own directory (none when its name is made durable later: ``create(sync_dir=False)``).
    sync_dirs: tuple[str, ...] = ()


@dataclass(eq=False)
class _Round:
    """A pipelined batch of appends: written, its syncs in flight on the sync threads."""

    seq: int
    batch: list[_Op]
    errors: list[BaseException | None]
    unsynced: dict[_Segment, list[int]]  # segment -> batch indexes of the appends it confirms
    sizes: dict[_Segment, int]  # the segment's size after this round's write: what its sync makes durable
    taken_at: float
    outcomes: dict[_Segment, tuple[float, OSError | None]] = field(default_factory=dict)
    remaining: int = 0  # syncs not yet returned


class GroupCommitWriter:
    """The writer thread. ``submit_*`` are called on the loop; ``done`` callbacks run there too."""

    def __init__(self, fs: FileSystem, stats: FileLedgerStats, *, sync: bool = True,
                 group_wait_s: float = DEFAULT_GROUP_WAIT_S, group_bytes: int = DEFAULT_GROUP_BYTES,
                 group_min_bytes: int = DEFAULT_GROUP_MIN_BYTES,
                 max_open_files: int = DEFAULT_MAX_OPEN_FILES, direct_io: bool = True) -> None:
        self._fs = fs
        # Segments are written with direct I/O where the file system has it (see "Direct writes" in
        # the module docstring); without syncs the page cache is the faster place to leave them.
        self._direct = direct_io and sync
        self._buf = mmap.mmap(-1, _BUFFER_STEP)  # the block buffer (writer thread only)
        # Zeros written ahead of the records when a write grows a segment (see "Zeros ahead" in the
        # module docstring): at most this many bytes; none without syncs, where they would save nothing.
        self._prealloc = PREALLOC_MAX if sync else 0
        self._zeros = mmap.mmap(-1, max(self._prealloc, BLOCK))  # never written: reads as zeros
        # At most this many segment files stay open; the least recently appended-to beyond it are
        # parked (closed, all synced) and reopened by their next append. Every topic has a segment
        # open for appends, so without this a broker with many idle topics runs out of descriptors.
        self._max_open = max(1, max_open_files)
        self._stats = stats
        self._sync = sync
        # Group commit of steady streams (see the module docstring); off without syncs.
        self._group_wait_s = group_wait_s if sync else 0.0
        self._group_bytes = group_bytes
        self._group_min_bytes = max(1, group_min_bytes)
        self._submitted_bytes = 0  # append bytes ever submitted (written by the loop only)
        self._taken_bytes = 0  # append bytes ever taken into a batch (writer thread only)
        self._submitted_others = 0  # operations other than appends ever submitted (loop only)
        self._taken_others = 0  # ... and ever taken into a batch (writer thread only)
        self._gathering = False  # the writer waits for group_bytes to be queued
        self._last_batch_bytes = 0  # writer thread only
        # How long the last pipelined sync took (any thread writes it); for a round synced in its write, the
        # write and sync together (see "Writes that sync").
        self._last_sync_s = 0.0
        self._queue: deque[_Op] = deque()
        # The writer's waits (idle, gathering) block on this lock, held while nobody has woken the writer;
        # the loop wakes it by releasing the lock (_wake). A bare lock rather than a Condition: a wake-up
        # costs the loop half the CPU (5.5 against 10.5 us on a 2-core VM, docs/benchmarks.md), and one that
        # comes before the writer waits is not lost (the lock stays released: the wait returns at once and
        # looks again).
        self._wakeup = threading.Lock()
        self._wakeup.acquire()
        self._stopping = False
        self._idle = False  # the writer thread is waiting for work (see _submit)
        self._loop: asyncio.AbstractEventLoop | None = None
        # When the writer took the batch whose completions are running now (loop thread only): an
        # append's completion reads it to time its write apart from its wait in the queue.
        self.batch_taken_at = 0.0
        self._thread: threading.Thread | None = None
        # Writer-thread state (never touched by the loop):
        self._segments: dict[str, _Segment] = {}
        self._open_lru: OrderedDict[_Segment, None] = OrderedDict()  # segments with a handle, oldest first
        self._sync_pool: ThreadPoolExecutor | None = None  # created on first need
        self._failed: dict[Owner, BaseException] = {}
        # The round (batch sequence number) in which each failed owner failed: a pipelined round
        # settled later fails the owner's appends only if they were written after the failure.
        self._failed_seq: dict[Owner, int] = {}
        self._seq = 0  # the writer thread's current batch
        # Pipelined rounds, oldest first: settled (completions posted) strictly in this order by
        # whichever thread returns a round's last sync. Guarded by _settle_lock, as are the
        # failure of an owner by a settled sync and every _Segment.syncing.
        self._inflight: deque[_Round] = deque()
        self._settle_lock = threading.RLock()
        self._settled = threading.Condition(self._settle_lock)

    # -- loop side ------------------------------------------------------------------------------

    def _submit(self, op: _Op) -> None:
        if self._thread is None:
            if self._stopping:
                raise RuntimeError("the writer is stopped")
            self._loop = asyncio.get_running_loop()
            self._thread = threading.Thread(target=self._run, name="ml-writer", daemon=True)
            self._thread.start()
        # The hot path takes no lock (contending for it with the writer thread costs more than
        # the rest of an add): deque.append is atomic, and the writer is only woken when it is,
        # or is about to be, waiting. The writer sets _idle before its last look at the queue,
        # and we append before looking at _idle, so one of us always sees the other.
        other = op.kind != "append"
        if other:
            # Only appends are gathered into groups: anything else ends a wait at once. (Counted
            # before it is queued, so the writer never takes more than it has seen counted.)
            self._submitted_others += 1
        self._queue.append(op)
        if self._idle or (other and self._gathering):
            self._wake()

    def append(self, owner: Owner, path: str, records: list[bytes], done: Done, nbytes: int = -1) -> None:
        """Append records (the concatenation of the parts; nbytes is their total size, computed
        when not given) to the open segment path; done(None) once they are durable."""
        if nbytes < 0:
            nbytes = sum(map(len, records))
        # Counted before it is queued (the writer never takes more than it has seen counted), and
        # before looking at _gathering: the writer sets that before it compares the counts, so
        # either it sees these bytes or we see it gathering.
        self._submitted_bytes += nbytes
        self._submit(_Op("append", owner, done, path, parts=records, nbytes=nbytes))
        if self._gathering and self._submitted_bytes - self._taken_bytes >= self._group_bytes:
            self._wake()

    def _wake(self) -> None:
        """Wake the writer from its wait (or make its next wait return at once: it looks again then)."""
        try:
            self._wakeup.release()
        except RuntimeError:  # released already, and not waited on since
            pass

    def create(self, owner: Owner, path: str, header: bytes, done: Done, *, sync_dir: bool = True) -> None:
        """Create the segment path (must not exist) with its header: its directory entry durable
        at once (sync_dir=False: not; the owner syncs the directory before anything depends on the
        name, see ``run``), the header with the first append."""
        self._submit(_Op("create", owner, done, path, header, sync_dirs=(_parent(path),) if sync_dir else ()))

    def close_segment(self, owner: Owner, path: str, done: Done = _ignore) -> None:
        """Sync (confirming its appends) and close an open segment. Runs even for a failed owner."""
        self._submit(_Op("close", owner, done, path))

    def release(self, owner: Owner, done: Done = _ignore) -> None:
        """The owner is closing: sync and close its open segments and forget its failure."""
        self._submit(_Op("release", owner, done))

    def recover(self, owner: Owner, truncations: list[tuple[str, int]], done: Done) -> None:
        """Close the owner's segments, cut each (path, size) back to size and sync it; then the
        owner takes writes again. The sizes come from the loop: they end at the last confirmed
        record. Paths that do not exist are skipped."""
        self._submit(_Op("recover", owner, done, truncations=tuple(truncations)))

    def run(self, task: Callable[[], None], done: Done = _ignore, owner: Owner | None = None,
            sync_dir: str | None = None, also_sync: tuple[str, ...] = ()) -> None:
        """Run task on the writer thread, in order with everything else (file creation,
        cursor state, deletion). Its OSError goes to done; it fences the owner if one is given.
        sync_dir: a directory in which the task made (or renamed) a name; it is fsynced, once for
        every operation of the batch that names it, before done runs (see the module docstring).
        also_sync: more directories synced the same way (names made earlier that the task's outcome
        depends on); a failed sync of any fails the task."""
        dirs = also_sync if sync_dir is None else (sync_dir, *also_sync)
        self._submit(_Op("task", owner, done, task=task, sync_dirs=dirs))

    async def barrier(self) -> None:
        """Wait until everything submitted before has completed."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(exc: BaseException | None) -> None:
            if not future.done():
                future.set_result(None)

        self._submit(_Op("task", None, done, task=lambda: None))
        await future

    def stop(self) -> None:
        """Finish what is queued, then end the thread (joins it). Completions not yet run on the
        loop are still posted; call after ``barrier()`` to have them all delivered."""
        self._stopping = True
        self._wake()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _complete(self, results: list[tuple[Done, BaseException | None]], taken_at: float) -> None:
        self.batch_taken_at = taken_at
        for done, exc in results:
            try:
                done(exc)
            except Exception:
                log.exception("managed-ledger write completion raised")

    # -- writer thread --------------------------------------------------------------------------

    def _run(self) -> None:
        queue = self._queue
        while True:
            if not queue:
                self._idle = True
                while not queue and not self._stopping:
                    self._wakeup.acquire()
                self._idle = False
                if not queue:
                    break  # stopping, and nothing left to do
            if self._group_wait_s > 0 and self._last_batch_bytes >= self._group_min_bytes:
                self._gather()
            batch = [queue.popleft() for _ in range(len(queue))]
            taken_at = time.monotonic()
            nbytes = others = 0
            for op in batch:
                nbytes += op.nbytes
                others += op.kind != "append"
            self._taken_bytes += nbytes
            self._taken_others += others
            self._last_batch_bytes = nbytes
            self._seq += 1
            if self._sync and not others and nbytes * 8 < self._group_bytes:
                if self._start_round(batch, taken_at):
                    continue
            self._drain()  # anything but light appends runs alone, after every pipelined round settled
            try:
                results = self._process(batch, appends_only=not others)
            except Exception as exc:  # a bug: fail the batch rather than leave its callers waiting
                log.exception("managed-ledger writer: a batch of %d operations failed", len(batch))
                results = [(op.done, exc) for op in batch]
                self._fence_all(batch, exc)
            self._post(results, taken_at)
        self._drain()
        for segment in list(self._segments.values()):
            self._forget(segment)
        if self._sync_pool is not None:
            self._sync_pool.shutdown(wait=True)
            self._sync_pool = None

    def _post(self, results: list[tuple[Done, BaseException | None]], taken_at: float) -> None:
        loop = self._loop
        assert loop is not None
        try:
            loop.call_soon_threadsafe(self._complete, results, taken_at)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            log.debug("writer: loop closed, %d completions dropped", len(results))

    # -- pipelined syncs (light rounds of appends) ------------------------------------------------

    def _start_round(self, batch: list[_Op], taken_at: float) -> bool:
        """Write a batch of appends to few segments and hand its syncs to the sync threads, without
        waiting for the syncs of earlier rounds; the thread whose sync completes a round settles it
        (in order: see _sync_returned). False (nothing done) when the batch is not for this path:
        it appends to PARALLEL_SYNC_MIN segments or more (those share one serial round, as before)."""
        paths = {op.path for op in batch}
        if len(paths) >= PARALLEL_SYNC_MIN:
            return False
        # A grouped stream (see "Pipelined syncs" in the module docstring): the writer would only wait
        # for the next batch now, and syncs take less than that wait, so it syncs the round itself, in
        # the write (see "Writes that sync").
        grouped = (len(paths) == 1 and self._group_wait_s > 0 and self._last_batch_bytes >= self._group_min_bytes
                   and self._last_sync_s < self._group_wait_s)
        errors: list[BaseException | None] = [None] * len(batch)
        unsynced: dict[_Segment, list[int]] = {}
        try:
            self._append_all(batch, 0, len(batch), errors, unsynced, sync=grouped)
            # (A list: once the first sync is submitted, settling may change unsynced at any time.)
            syncs: list[tuple[_Segment, FileHandle | OSError]] = []
            for segment in unsynced:
                try:
                    syncs.append((segment, self._handle(segment)))
                except OSError as exc:  # (reopening a parked file failed: that is its sync's outcome)
                    syncs.append((segment, exc))
        except Exception as exc:  # a bug: fail the batch rather than leave its callers waiting
            log.exception("managed-ledger writer: a batch of %d appends failed", len(batch))
            self._fence_all(batch, exc)
            self._drain()
            self._post([(op.done, exc) for op in batch], taken_at)
            return True
        round_ = _Round(self._seq, batch, errors, unsynced, {s: s.written for s, _ in syncs}, taken_at,
                        remaining=len(syncs))
        with self._settled:
            while len(self._inflight) >= PIPELINE_DEPTH:
                self._settled.wait()
            self._inflight.append(round_)
            for segment, _ in syncs:
                segment.syncing += 1
        if not syncs:
            self._sync_returned(round_, None, (0.0, None))
        elif grouped:
            segment, handle = syncs[0]
            if segment.synced_write is None:  # (what it follows was not synced yet: see _write_blocks)
                self._sync_in_round(round_, segment, handle)
            else:
                self._last_sync_s, segment.synced_write = segment.synced_write, None
                self._sync_returned(round_, segment, (self._last_sync_s, None))
        else:
            if self._sync_pool is None:
                self._sync_pool = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="ml-sync")
            for segment, handle in syncs:
                self._sync_pool.submit(self._sync_in_round, round_, segment, handle)
        self._park_beyond_limit()
        return True

    def _sync_in_round(self, round_: _Round, segment: _Segment, handle: FileHandle | OSError) -> None:
        """On a sync thread: sync one segment of a pipelined round."""
        try:
            outcome = _timed_sync(handle)
        except BaseException as exc:  # pragma: no cover - _timed_sync returns OSErrors; a bug must not hang adds
            outcome = (0.0, OSError(f"sync failed: {exc!r}"))
        self._last_sync_s = outcome[0]
        self._sync_returned(round_, segment, outcome)

    def _sync_returned(self, round_: _Round, segment: _Segment | None,
                       outcome: tuple[float, OSError | None]) -> None:
        """A sync of a round returned: once all of a round's have, settle every complete round at
        the head of the pipeline and post its completions (so completions stay in submission order)."""
        with self._settled:
            if segment is not None:
                round_.outcomes[segment] = outcome
                round_.remaining -= 1
            inflight = self._inflight
            while inflight and inflight[0].remaining <= 0:
                done = inflight.popleft()
                try:
                    results = self._settle(done)
                except Exception as exc:  # a bug: fail the round rather than leave its callers waiting
                    log.exception("managed-ledger writer: settling %d appends failed", len(done.batch))
                    results = [(op.done, exc) for op in done.batch]
                    self._fence_all(done.batch, exc, done.seq)
                self._post(results, done.taken_at)
                self._settled.notify_all()

    def _settle(self, round_: _Round) -> list[tuple[Done, BaseException | None]]:
        """Apply a round's sync outcomes in its order (under _settle_lock, rounds in order). An
        owner that failed in an earlier round gets none of this round's appends confirmed: they
        were written after the failure (before the writer knew of it)."""
        unsynced, errors = round_.unsynced, round_.errors
        for segment in list(unsynced):
            segment.syncing -= 1
            if segment not in unsynced:  # (settled by a failure of its owner in this round)
                continue
            failed_at = self._failed_seq.get(segment.owner)
            if failed_at is not None and failed_at < round_.seq:
                fenced = _fenced(self._failed[segment.owner])
                for k in unsynced.pop(segment):
                    errors[k] = fenced
                continue
            self._sync_segment(segment, unsynced, errors, round_.outcomes[segment], round_.sizes[segment],
                               round_.seq)
        return [(op.done, errors[k]) for k, op in enumerate(round_.batch)]

    def _drain(self) -> None:
        """Wait until every pipelined round has settled (and posted its completions)."""
        with self._settled:
            while self._inflight:
                self._settled.wait()

    def _gather(self) -> None:
        """Wait up to group_wait_s for group_bytes of appends to be queued; any other operation
        (a barrier, a segment to create or close, a cursor write) or stop() ends the wait."""
        deadline = time.monotonic() + self._group_wait_s
        self._gathering = True
        try:
            while (self._submitted_bytes - self._taken_bytes < self._group_bytes and not self._stopping
                   and self._submitted_others == self._taken_others):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._wakeup.acquire(timeout=remaining)
        finally:
            self._gathering = False

    def _process(self, batch: list[_Op], appends_only: bool = False) -> list[tuple[Done, BaseException | None]]:
        # Appends alone to fewer than PARALLEL_SYNC_MIN segments: _sync_all would sync each segment
        # right after the writes, one after another, so each write syncs itself instead (see
        # "Writes that sync" in the module docstring).
        sync_writes = (appends_only and self._sync
                       and (len(batch) == 1 or len({op.path for op in batch}) < PARALLEL_SYNC_MIN))
        errors: list[BaseException | None] = [None] * len(batch)
        # Appends waiting for the sync of their segment: segment -> batch indexes.
        unsynced: dict[_Segment, list[int]] = {}
        # Operations waiting for the sync of a directory they made a name in: directory -> batch indexes.
        dirs: dict[str, list[int]] = {}
        i = 0
        n = len(batch)
        while i < n:
            op = batch[i]
            if op.kind == "append":
                j = i + 1
                while j < n and batch[j].kind == "append":
                    j += 1
                self._append_all(batch, i, j, errors, unsynced, sync=sync_writes)
                i = j
                continue
            failure = self._failed.get(op.owner) if op.owner is not None else None
            if failure is not None and op.kind not in ("close", "recover", "release"):
                errors[i] = _fenced(failure)
                i += 1
                continue
            try:
                self._execute(op, unsynced, errors)
            except OSError as exc:
                errors[i] = exc
                if op.owner is not None:
                    self._fail_owner(op.owner, exc, unsynced, errors)
            else:
                for directory in op.sync_dirs:
                    dirs.setdefault(directory, []).append(i)
            i += 1
        if dirs:
            self._sync_dirs(batch, dirs, unsynced, errors)
        self._sync_all(unsynced, errors)
        self._park_beyond_limit()
        return [(op.done, errors[k]) for k, op in enumerate(batch)]

    # -- open segment files -----------------------------------------------------------------------

    def _handle(self, segment: _Segment) -> FileHandle:
        """The segment's open file (reopened if it was parked); marks it recently used."""
        if segment.handle is None:
            segment.handle = self._fs.open_append(segment.path, create=False, direct=self._direct)
            self._stats.add(segment_reopens_total=1)
        self._open_lru[segment] = None
        self._open_lru.move_to_end(segment)
        return segment.handle

    def _park_beyond_limit(self) -> None:
        """Close the least recently used files beyond the limit (after the batch's syncs: every
        parked segment is fully synced, so parking never delays or loses a confirmation)."""
        excess = len(self._open_lru) - self._max_open
        if excess <= 0:
            return
        with self._settle_lock:  # (a file with a pipelined sync in flight stays open until it returns)
            parked = []
            for segment in self._open_lru:
                if not segment.syncing:
                    parked.append(segment)
                    if len(parked) == excess:
                        break
        for segment in parked:
            del self._open_lru[segment]
            if segment.handle is not None:
                _close_quietly(segment.handle)
                segment.handle = None

    def _forget(self, segment: _Segment) -> None:
        """Close (if open) and drop a segment."""
        self._segments.pop(segment.path, None)
        self._open_lru.pop(segment, None)
        if segment.handle is not None:
            _close_quietly(segment.handle)
            segment.handle = None

    def _append_all(self, batch: list[_Op], i: int, j: int, errors: list[BaseException | None],
                    unsynced: dict[_Segment, list[int]], sync: bool = False) -> None:
        """Write batch[i:j], all appends: one write per segment, its appends in submission order.

        Producers on several topics (or one client's several producers on one connection) submit
        their appends interleaved, A B C A B C: a write per run of one segment was a write per
        append, where one per segment carries the same bytes. (Each is a device round trip: a direct
        write returns once the device has the bytes.) Nothing is confirmed before the round's syncs,
        so the order of writes across segments does not matter."""
        # (Measured, bench.compare's four Go producers, 8 alternating rounds: 1.46 -> 1.0 writes per
        # segment sync, 0.53 -> 0.50 us of broker CPU per message, the rate's median ratio 1.04.)
        if j - i == 1:
            runs: Iterable[list[int]] = ([i],)
        else:
            by_path: dict[str, list[int]] = {}
            for k in range(i, j):
                by_path.setdefault(batch[k].path, []).append(k)
            runs = by_path.values()
        for run in runs:
            owner = batch[run[0]].owner
            failure = self._failed.get(owner) if owner is not None else None
            if failure is not None:
                for k in run:
                    errors[k] = _fenced(failure)
            else:
                self._append_run(batch, run, errors, unsynced, sync)

    def _append_run(self, batch: list[_Op], run: list[int], errors: list[BaseException | None],
                    unsynced: dict[_Segment, list[int]], sync: bool = False) -> None:
        """Write the appends batch[k] for k in run, all to one segment, as one write (that syncs
        the segment too, if sync)."""
        path = batch[run[0]].path
        segment = self._segments.get(path)
        if segment is None:
            missing = FileNotFoundError(f"segment {path} is not open for writing")
            for k in run:
                errors[k] = missing
            return
        parts: list[bytes] = []
        nbytes = 0
        for k in run:
            parts += batch[k].parts or ()
            nbytes += batch[k].nbytes
        try:
            self._write_blocks(segment, self._handle(segment), parts, nbytes, sync)
        except OSError as exc:
            for k in run:
                errors[k] = exc
            self._fail_owner(segment.owner, exc, unsynced, errors)
            return
        unsynced.setdefault(segment, []).extend(run)
        self._stats.add(bytes_written_total=nbytes)

    def _write_blocks(self, segment: _Segment, handle: FileHandle, parts: list[bytes], nbytes: int,
                      sync: bool = False) -> None:
        """Write parts (nbytes in all) after the segment's last record, as whole blocks: the last
        partial block again (its bytes kept in ``segment.tail``), then the new bytes, then zeros to
        the end of the block (see "Direct writes" in the module docstring). sync: the write syncs
        the segment too (``segment.synced_write``; see "Writes that sync")."""
        tail = segment.tail
        start = segment.written - len(tail)
        used = len(tail) + nbytes
        padded = -(-used // BLOCK) * BLOCK
        buf = self._block_buffer(padded)
        buf[: len(tail)] = tail
        buf[len(tail) : used] = parts[0] if len(parts) == 1 else b"".join(parts)
        if padded > used:
            buf[used:padded] = _ZERO_BLOCK[: padded - used]
        view = memoryview(buf)[:padded]
        # Zeros ahead of the records (see "Zeros ahead" in the module docstring): when this write
        # grows the file, the same write also lays down zeros after it.
        ahead = min(self._prealloc, (start + padded) // BLOCK * BLOCK) if start + padded > segment.size else 0
        zeros = memoryview(self._zeros)[:ahead] if ahead else None
        # A write syncs only its own bytes (it may be one FUA write): only when everything before it
        # is durable already. (It rewrites the last partial block, so a new segment's header too.)
        sync = sync and start <= segment.synced
        segment.synced_write = None
        started = time.perf_counter()
        try:
            try:
                handle.pwrite_parts([view] if zeros is None else [view, zeros], start, sync=sync)
            except OSError as exc:
                if zeros is None or exc.errno != errno.ENOSPC:
                    raise
                ahead = 0  # (no room for the zeros: the records alone may still fit)
                handle.pwrite_parts([view], start, sync=sync)
        finally:
            # Released here: a failed write's traceback keeps pwrite_parts' frame (and so this view)
            # alive until a full collection, and an exported buffer cannot be grown (closed).
            view.release()
            if zeros is not None:
                zeros.release()
        end = segment.written + nbytes
        keep = end % BLOCK
        segment.tail = buf[used - keep : used] if keep else b""
        segment.written = end
        segment.size = max(segment.size, start + padded + ahead)
        if sync:
            segment.synced_write = time.perf_counter() - started

    def _block_buffer(self, size: int) -> mmap.mmap:
        """The writer's block-aligned buffer (an anonymous mapping), at least size bytes."""
        if len(self._buf) < size:
            self._buf.close()
            self._buf = mmap.mmap(-1, -(-size // _BUFFER_STEP) * _BUFFER_STEP)
        return self._buf

    def _trim(self, segment: _Segment) -> None:
        """Cut the zeros after a closing segment's last record (not synced: if the cut is lost, the
        scan on open reads the zeros as the end of the segment and cuts them then)."""
        if segment.size <= segment.written:
            return
        try:
            self._handle(segment).truncate(segment.written)
        except OSError as exc:
            log.warning("segment %s: could not cut the zeros after its last record: %s", segment.path, exc)
            return
        segment.size = segment.written

    def _sync_all(self, unsynced: dict[_Segment, list[int]], errors: list[BaseException | None]) -> None:
        """Sync every segment the batch appended to. Many segments (many topics) are synced by a
        few threads at once: the file system then shares its journal commits and device cache
        flushes among them (about 2.5x faster for 1000 topics). The outcomes are applied in the
        batch's order, exactly as if the syncs had run one after another."""
        segments = list(unsynced)
        if not self._sync or len(segments) < PARALLEL_SYNC_MIN:
            for segment in segments:
                if segment in unsynced:  # (a failure of its owner may have settled it already)
                    self._sync_segment(segment, unsynced, errors)
            return
        if self._sync_pool is None:
            self._sync_pool = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="ml-sync")
        handles: list[FileHandle | OSError] = []
        for segment in segments:
            try:
                handles.append(self._handle(segment))
            except OSError as exc:  # (reopening a parked file failed: that is its sync's outcome)
                handles.append(exc)
        outcomes = list(self._sync_pool.map(_timed_sync, handles))
        for segment, outcome in zip(segments, outcomes, strict=True):
            if segment in unsynced:
                self._sync_segment(segment, unsynced, errors, outcome)

    def _sync_dirs(self, batch: list[_Op], dirs: dict[str, list[int]], unsynced: dict[_Segment, list[int]],
                   errors: list[BaseException | None]) -> None:
        """fsync each directory the batch made names in, once; an operation whose directory
        failed to sync fails (and fences its owner, as a failed create always did)."""
        paths = list(dirs)
        if len(paths) < PARALLEL_SYNC_MIN:
            outcomes = [_sync_dir(self._fs, path) for path in paths]
        else:
            if self._sync_pool is None:
                self._sync_pool = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="ml-sync")
            outcomes = list(self._sync_pool.map(partial(_sync_dir, self._fs), paths))
        self._stats.add(directory_syncs_total=len(paths))
        for path, exc in zip(paths, outcomes, strict=True):
            if exc is None:
                continue
            for k in dirs[path]:
                errors[k] = exc
                owner = batch[k].owner
                if owner is not None:
                    self._fail_after(batch, k, owner, exc, unsynced, errors)

    def _fail_after(self, batch: list[_Op], k: int, owner: Owner, exc: OSError,
                    unsynced: dict[_Segment, list[int]], errors: list[BaseException | None]) -> None:
        """Operation k of owner failed after the rest of the batch ran (its directory sync): fail
        what the owner did after it in the batch, as if it had been fenced at k. (An append
        after it may already be synced - a close syncs at once - but the name of the file it
        went to may not be durable.) A recover of the owner later in the batch ends that."""
        for j in range(k + 1, len(batch)):
            op = batch[j]
            if op.owner is not owner:
                continue
            if op.kind == "recover":
                return
            if op.kind not in ("close", "release") and errors[j] is None:
                errors[j] = _fenced(exc)
        self._fail_owner(owner, exc, unsynced, errors)

    def _sync_segment(self, segment: _Segment, unsynced: dict[_Segment, list[int]],
                      errors: list[BaseException | None],
                      outcome: tuple[float, OSError | None] | None = None, size: int = -1,
                      seq: int = -1) -> None:
        """Sync one segment (or apply the outcome of a sync already done) and settle its appends.
        size: what the sync made durable (a pipelined round's; the segment's size when not given).
        seq: the round (the writer's current batch when not given)."""
        waiting = unsynced.pop(segment, [])
        if self._sync:
            if outcome is None and segment.synced_write is not None:  # (the write synced it)
                outcome, segment.synced_write = (segment.synced_write, None), None
            if outcome is None:
                try:
                    outcome = _timed_sync(self._handle(segment))
                except OSError as reopen_error:
                    outcome = (0.0, reopen_error)
            elapsed, exc = outcome
            if exc is not None:
                for k in waiting:
                    errors[k] = exc
                self._fail_owner(segment.owner, exc, unsynced, errors, seq)
                return
            self._stats.fsync_latency.observe(elapsed)
        segment.synced = max(segment.synced, size) if size >= 0 else segment.written
        if waiting:
            self._stats.group_commit_size.observe(len(waiting))
            self._stats.add(entries_written_total=len(waiting))

    def _fence_all(self, batch: list[_Op], exc: BaseException, seq: int = -1) -> None:
        """A batch (or round) failed as a whole, a bug: fence each owner in it, as a failed write
        would, so that none of its later appends (queued before the loop hears of the failure) is
        confirmed after one that failed. Not an owner released in the batch: it is gone."""
        released = {id(op.owner) for op in batch if op.kind == "release"}
        owners = {id(op.owner): op.owner for op in batch if op.owner is not None and id(op.owner) not in released}
        for owner in owners.values():
            self._fail_owner(owner, exc, {}, [], seq)

    def _fail_owner(self, owner: Owner, exc: BaseException, unsynced: dict[_Segment, list[int]],
                    errors: list[BaseException | None], seq: int = -1) -> None:
        """Fence owner: its appends not yet confirmed in this batch (round seq: the writer's
        current batch when not given) fail with exc."""
        if owner not in self._failed:
            # (The owner's name only: its other state belongs to the loop.)
            log.error("write failed, fencing %s: %s", getattr(owner, "name", "?"), exc)
            self._stats.add(write_errors_total=1)
        seq = self._seq if seq < 0 else seq
        with self._settle_lock:  # (the writer thread and the settling sync thread both fence)
            self._failed[owner] = exc
            self._failed_seq[owner] = min(seq, self._failed_seq.get(owner, seq))
        for segment in [s for s in unsynced if s.owner is owner]:
            for k in unsynced.pop(segment):
                errors[k] = exc

    def _execute(self, op: _Op, unsynced: dict[_Segment, list[int]], errors: list[BaseException | None]) -> None:
        fs = self._fs
        if op.kind == "task":
            assert op.task is not None
            op.task()
        elif op.kind == "create":
            handle = fs.open_append(op.path, create=True, direct=self._direct)
            created = _Segment(op.path, handle, op.owner, 0, 0)
            try:
                # The directory entry is made durable with the batch's directory syncs (before
                # the create is confirmed); the header's bytes with the first append's sync (the
                # same fdatasync), which is when anything starts to depend on them. A crash
                # before that leaves a short file (or one of zeros), which recovery removes.
                self._write_blocks(created, handle, [op.data], len(op.data))
            except OSError:
                _close_quietly(handle)
                try:  # leave no half-written header behind
                    fs.unlink(op.path)
                except OSError:
                    pass
                raise
            self._segments[op.path] = created
            self._open_lru[created] = None
        elif op.kind == "close":
            closing = self._segments.get(op.path)
            if closing is None:
                return
            if self._sync_before_close(closing, unsynced):
                self._sync_segment(closing, unsynced, errors)
            self._trim(closing)
            self._forget(closing)
        elif op.kind == "recover":
            self._recover(op)
        elif op.kind == "release":
            for segment in [s for s in self._segments.values() if s.owner is op.owner]:
                if self._sync_before_close(segment, unsynced):
                    self._sync_segment(segment, unsynced, errors)
                self._trim(segment)
                self._forget(segment)
            self._failed.pop(op.owner, None)
            self._failed_seq.pop(op.owner, None)
        else:  # pragma: no cover - the submit methods build every op
            raise AssertionError(op.kind)

    def _sync_before_close(self, segment: _Segment, unsynced: dict[_Segment, list[int]]) -> bool:
        """A segment about to close is synced if it has appends waiting, or has never been synced
        (closed before its first append: a closed segment always has a durable header, so recovery
        can tell a lost one from one a crash interrupted). Never for a fenced owner: what it wrote
        after the failure must not become durable."""
        return segment in unsynced or (segment.synced < segment.written and segment.owner not in self._failed)

    def _recover(self, op: _Op) -> None:
        fs = self._fs
        for segment in list(self._segments.values()):
            if segment.owner is op.owner:
                self._forget(segment)
        dirs: set[str] = set()
        for path, size in op.truncations:
            if not fs.exists(path):
                continue
            handle = fs.open_append(path, create=False)
            try:
                if handle.size() != size:
                    handle.truncate(size)
                handle.sync()
            finally:
                _close_quietly(handle)
            dirs.add(_parent(path))
        for directory in dirs:
            fs.fsync_dir(directory)
        self._failed.pop(op.owner, None)
        self._failed_seq.pop(op.owner, None)


def _timed_sync(handle: FileHandle | OSError) -> tuple[float, OSError | None]:
    """fdatasync a file: (seconds it took, the error if it failed). Runs on the sync threads too."""
    if isinstance(handle, OSError):
        return 0.0, handle
    started = time.perf_counter()
    try:
        handle.sync()
    except OSError as exc:
        return time.perf_counter() - started, exc
    return time.perf_counter() - started, None


def _sync_dir(fs: FileSystem, path: str) -> OSError | None:
    """fsync a directory: its error, if it failed. Runs on the sync threads too."""
    try:
        fs.fsync_dir(path)
    except OSError as exc:
        return exc
    return None


def _fenced(cause: BaseException) -> StorageUnavailableError:
    error = StorageUnavailableError(f"managed ledger is fenced after a storage failure: {cause}")
    error.__cause__ = cause
    return error


def _parent(path: str) -> str:
    return posixpath.dirname(path) or "."


def _close_quietly(handle: FileHandle) -> None:
    try:
        handle.close()
    except OSError:
        pass
