"""JSON Lines input of `rmqtool put --from-jsonl`: one message object per line (the JSON output's field names),
read, parsed and encoded a batch at a time, and the put loop that stores the batches in order.

The input is read as it comes (a pipe is not waited on to fill a batch) in blocks of whole lines; the first
batches are small so the first acknowledgements come at once. A regular file of PARSE_HELPER_MIN_BYTES or more
is shared with a forked helper process (ParseHelper) that parses and encodes every other block; the writes,
flushes and acknowledgements stay in the calling process, in input order. Memory: a few batches of BATCH_LINES.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import stat
import sys
from typing import Iterator

from engine.broker.write.batch import MessageBatch, new_uniq_generator
from engine.errors import InvalidArgumentError, StoreError

#: JSON lines parsed and put per batch at most (one commit-log write, one flush with --sync-flush).
BATCH_LINES = 4096
FIRST_BATCH_LINES = 64
READ_CHUNK = 1 << 20
#: A JSONL file at least this large is read, parsed and encoded by a helper process while this one writes and
#: acknowledges (see ParseHelper); smaller files and stdin are done in this process.
PARSE_HELPER_MIN_BYTES = 8 << 20


def _line_blocks(read) -> Iterator[tuple[bytes, int]]:
    """(a block of whole lines, the number of lines before it) per read(READ_CHUNK) of the input: what is
    available, cut after its last newline (the rest waits for the next read; a last line without a newline
    gets one). A UTF-8 BOM at the very start is dropped."""
    rest = b""
    lineno = 0
    first = True
    while True:
        chunk = read(READ_CHUNK)
        data = rest + chunk if rest else chunk
        if not chunk:
            if not data:
                return
            data += b"\n"  # a last line without a newline
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        block = data[:cut]
        if first:
            first = False
            if block.startswith(b"\xef\xbb\xbf"):
                block = block[3:]
        if block:
            yield block, lineno
            lineno += block.count(b"\n")


def _block_batches(block: bytes, lineno: int, name: str, size: list, batch_lines: int = BATCH_LINES):
    """(objects, their line numbers, the error that ends the input there) per batch of the block's lines: a
    batch has size[0] lines, and size[0] doubles after each, up to batch_lines. Ends after an error."""
    from json.decoder import JSONDecodeError

    while block:
        take = _nth_newline(block, size[0])
        size[0] = min(size[0] * 2, batch_lines)
        objs, lines, err = _parse_block(block[:take], lineno, name, _SCAN, JSONDecodeError)
        lineno += block.count(b"\n", 0, take)
        block = block[take:]
        yield objs, lines, err
        if err is not None:
            return


_SCAN = json.JSONDecoder().scan_once


def read_jsonl(stream, name: str, batch_lines: int = BATCH_LINES) -> Iterator[tuple[list, list[int], Exception | None]]:
    """(objects, their line numbers, the error that ends the input there) per batch of lines.

    Reads whatever is available (a pipe is not waited on to fill a batch), so a slow producer gets its
    acknowledgements as it goes; the first batches are small (64 lines, doubling up to batch_lines), so the
    first acknowledgements come at once however large the input. A UTF-8 BOM at the start and blank lines are
    skipped.
    """
    size = [min(FIRST_BATCH_LINES, batch_lines)]
    for block, lineno in _line_blocks(getattr(stream, "read1", stream.read)):
        for objs, lines, err in _block_batches(block, lineno, name, size, batch_lines):
            yield objs, lines, err
            if err is not None:
                return


def _nth_newline(block: bytes, n: int) -> int:
    """The length of the first n lines of block (all of it if it has fewer)."""
    pos = 0
    for _ in range(n):
        j = block.find(b"\n", pos)
        if j < 0:
            return len(block)
        pos = j + 1
    return pos


def _parse_plain_lines(s: str, scan, decode_error) -> list | None:
    """The common case, fast: every line is exactly one JSON value and nothing else (no blank line, no
    whitespace around it). None when that is not so: the caller then goes line by line."""
    objs: list = []
    append = objs.append
    i, n = 0, len(s)
    try:
        while i < n:
            obj, end = scan(s, i)
            if s[end] != "\n":
                return None
            append(obj)
            i = end + 1
    except (StopIteration, decode_error, IndexError):
        return None
    return objs if len(objs) == s.count("\n") else None  # fewer: a value ran over a line end


def _parse_block(block: bytes, lineno: int, name: str, scan, decode_error) -> tuple[list, list[int], Exception | None]:
    """Parse whole lines: each must hold exactly one JSON value (checked line by line, never across lines)."""
    try:
        s = block.decode("utf-8")
    except UnicodeDecodeError:
        s = None
    if s is not None:
        objs = _parse_plain_lines(s, scan, decode_error)
        if objs is not None:
            return objs, range(lineno + 1, lineno + 1 + len(objs)), None
    objs: list = []
    lines: list[int] = []
    if s is not None:
        i, n = 0, len(s)
        while i < n:
            lineno += 1
            try:
                obj, end = scan(s, i)
            except (StopIteration, decode_error):
                obj, end = None, -1
            if end >= 0 and s[end] == "\n" and s.find("\n", i, end) < 0:
                objs.append(obj)
                lines.append(lineno)
                i = end + 1
                continue
            j = s.find("\n", i)
            line = s[i:j]
            i = j + 1
            if not line.strip():
                continue
            try:
                objs.append(json.loads(line))
                lines.append(lineno)
            except ValueError as e:
                return objs, lines, InvalidArgumentError(f"{name}:{lineno}: not JSON ({getattr(e, 'msg', e)})")
        return objs, lines, None
    for raw in block.split(b"\n")[:-1]:  # not UTF-8 somewhere: find the line
        lineno += 1
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return objs, lines, InvalidArgumentError(f"{name}:{lineno}: not UTF-8 text")
        if text.strip():
            try:
                objs.append(json.loads(text))
                lines.append(lineno)
            except ValueError as e:
                return objs, lines, InvalidArgumentError(f"{name}:{lineno}: not JSON ({getattr(e, 'msg', e)})")
    return objs, lines, None


def open_jsonl(path: str, queue_id: int, name: str):
    """The prepared batches of a JSONL input, a path or "-" for stdin (see prepared_batches): a regular file of
    PARSE_HELPER_MIN_BYTES or more through a ParseHelper, stdin and smaller files in this process. Close what it
    returns when done (a ParseHelper's process ends with it)."""
    if path == "-":
        return prepared_batches(read_jsonl(sys.stdin.buffer, "<stdin>"), queue_id, name)
    p = path
    try:
        f = open(p, "rb")
    except OSError as e:
        raise InvalidArgumentError(f"cannot read {p}: {e.strerror}") from None
    st = os.fstat(f.fileno())
    if stat.S_ISREG(st.st_mode) and st.st_size >= PARSE_HELPER_MIN_BYTES:
        return ParseHelper(f, queue_id, name)
    return _read_file(f, queue_id, name)


def _read_file(f, queue_id: int, name: str):
    with f:
        yield from prepared_batches(read_jsonl(f, name), queue_id, name)


def prepared_batches(batches, queue_id: int, name: str):
    """(batch, line numbers, the bad message that ends the input or None, the read error that ends it or None)
    per chunk of input: the parsed objects checked and encoded into a MessageBatch (a chunk may also hold one
    ready MessageBatch, passed on as it is)."""
    for objs, lines, err in batches:
        if objs and isinstance(objs[0], MessageBatch):
            yield objs[0], lines, None, err
        else:
            batch, bad = _to_batch(objs, lines, queue_id, name)
            yield batch, lines, bad, err


#: With a ParseHelper, this process parses one block of input in PARSE_SHARE and the helper the others: the
#: writes and acknowledgements (about a third of a put's CPU) stay here, so the two processes weigh about the
#: same.
PARSE_SHARE = 2


def _pread_reader(fd: int):
    """read(n) over fd at an offset of this reader's own (pread), so two processes can read one open file."""
    pos = 0

    def read(n: int) -> bytes:
        nonlocal pos
        data = os.pread(fd, n, pos)
        pos += len(data)
        return data
    return read


class ParseHelper:
    """The prepared batches of a large JSONL file (see prepared_batches), in input order, with the parse and the
    encoding shared by two processes: the input is cut into blocks of whole lines (_line_blocks); this process
    parses every PARSE_SHARE-th block itself, and a forked helper process parses and encodes the others and
    sends their batches back through a pipe. The writes, flushes and acknowledgements all stay in this process,
    in input order, so a put means what it means without the helper. The pipe's buffer holds less than a batch:
    the helper works at most one batch ahead (memory: a few batches). The helper makes UNIQ_KEYs with a
    generator of its own (its pid and random bits, as a second producer would). It takes store times a block ahead
    of the writer: put_prepared raises any that would go back (MessageBatch.not_before). An error in the helper's blocks
    (a bad line, anything else) comes back after the batches before it, so the run stops where it would
    without the helper."""

    def __init__(self, f, queue_id: int, name: str):
        self._f, self._queue_id, self._name = f, queue_id, name
        ctx = multiprocessing.get_context("fork")
        sys.stdout.flush()  # nothing buffered is copied into the helper
        sys.stderr.flush()
        self._conn, send = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_parse_in_helper, args=(send, self._conn, f.fileno(), queue_id, name),
                                 daemon=True)
        try:
            self._proc.start()
        finally:
            send.close()
        self._gen = self._batches()

    def __iter__(self):
        return self._gen

    def _batches(self):
        size = [FIRST_BATCH_LINES]
        for k, (block, lineno) in enumerate(_line_blocks(_pread_reader(self._f.fileno()))):
            if k % PARSE_SHARE == 0:
                yield from prepared_batches(_block_batches(block, lineno, self._name, size), self._queue_id, self._name)
            else:
                yield from self._helper_block(k)

    def _helper_block(self, k: int):
        while True:
            try:
                data = self._conn.recv_bytes()
            except (EOFError, OSError):
                self._proc.join(5)
                raise StoreError(f"the process parsing the JSONL input ended unexpectedly (exit code "
                                 f"{self._proc.exitcode})") from None
            kind, payload = pickle.loads(data)
            if kind == "batch":
                yield payload
            elif kind == "raise":
                raise payload
            elif payload != k:  # pragma: no cover - both sides cut the same input the same way
                raise RuntimeError(f"the JSONL helper ended block {payload}, not {k}")
            else:
                return

    def close(self) -> None:
        self._gen.close()
        self._conn.close()
        if self._proc.is_alive():
            self._proc.terminate()
        self._proc.join()
        self._f.close()


def _parse_in_helper(conn, reader, fd: int, queue_id: int, name: str) -> None:
    """The helper process of ParseHelper: for each of its blocks, every prepared batch (pickled), then
    ("block", k); or the exception that stopped it.

    It keeps nothing of the writer's but the input: its copy of the pipe's reading end is closed (so a writer
    that dies, even killed, leaves the pipe without a reader and the next send ends this process), and its
    stdout and stderr go to /dev/null (so whoever reads the writer's output sees it end with the writer; the
    helper's errors go back through the pipe)."""
    import gc
    import signal

    reader.close()
    null = os.open(os.devnull, os.O_WRONLY)
    for out in (1, 2):
        os.dup2(null, out)
    os.close(null)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the writer's to handle; it stops this process
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the writer's handler (copied by the fork): ends it at once
    gc.disable()  # as the writer's render.gc_paused: the parsed objects are acyclic, freed by reference counting
    new_uniq_generator()  # not the copy of the writer's: its ids would repeat the writer's
    dump = pickle.dumps
    try:
        try:
            size = [BATCH_LINES]
            for k, (block, lineno) in enumerate(_line_blocks(_pread_reader(fd))):
                if k % PARSE_SHARE == 0:
                    continue
                for item in prepared_batches(_block_batches(block, lineno, name, size), queue_id, name):
                    conn.send_bytes(dump(("batch", item), protocol=pickle.HIGHEST_PROTOCOL))
                    if item[2] is not None or item[3] is not None:  # a bad message or a read error
                        return  # the writer stops the run there
                conn.send_bytes(dump(("block", k)))
        except (BrokenPipeError, ConnectionResetError):
            return  # the writer stopped reading: it stopped the run
        except BaseException as e:  # noqa: BLE001 - every error goes back to the writer, which raises it
            try:
                data = dump(("raise", e))
            except Exception:  # noqa: BLE001 - an exception that does not pickle goes back as its text
                data = dump(("raise", RuntimeError(f"{type(e).__name__}: {e}")))
            try:
                conn.send_bytes(data)
            except OSError:
                pass
    finally:
        conn.close()


def _to_batch(objs: list, lines: list[int], queue_id: int, name: str):
    """Check the parsed objects; the first bad one ends the batch (and the run) with its line number."""
    batch = MessageBatch(queue_id)
    try:
        batch.extend_json(objs)
    except (InvalidArgumentError, ValueError) as e:  # the messages before the bad one are in the batch
        return batch, InvalidArgumentError(f"{name}:{lines[len(batch)]}: {e}")
    return batch, None


def put_prepared(cfg, batches, sync_flush: bool, name: str, on_stored=None, create_in_nonempty: bool = False):
    """Put prepared batch after prepared batch (see prepared_batches), calling on_stored(BatchResult) as soon as
    each is stored (the acknowledgements); the store is opened (and created) only once a first message has passed
    every check. The first bad message, read error or failed put ends the run with one error that names its line
    of `name` and how many messages before it were stored. A non-empty directory that holds no store is refused
    unless create_in_nonempty (MessageStore). Returns (messages stored, the last batch result)."""
    from engine.broker.store import MessageStore  # the store opens the write path: imported when a put runs

    st = None
    stored, last = 0, None
    floor = 0  # the latest store time this run took from the clock: none it takes later goes back
    new_store = _new_store(cfg)
    try:
        for batch, lines, bad, err in batches:
            if len(batch):
                floor = batch.not_before(floor)
                if st is None:
                    st = MessageStore(cfg, writable=True, create=True, create_in_nonempty=create_in_nonempty)
                last = st.put_batch(batch, sync_flush)
                if on_stored is not None:
                    on_stored(last)
                stored += len(last)
                if last.error is not None:
                    i = getattr(last.error, "batch_index", len(last))
                    where = f"{name}:{lines[i]}: " if name and i < len(lines) else ""
                    stop = StoreError(f"{where}{last.error}; {stored} message(s) before it were stored")
                    stop.exit_code = getattr(last.error, "exit_code", 2)
                    raise stop
            if bad is not None or err is not None:
                raise InvalidArgumentError(f"{bad or err}; {stored} message(s) before it were stored")
    except BaseException:
        if st is not None:
            st.close()
            if new_store is not None and not stored:
                _remove_new_store(cfg, new_store)  # a store that holds nothing is no store: no skeleton left
        raise
    if st is not None:
        st.close()
    return stored, last


def _new_store(cfg):
    """None when cfg.root already holds a store; else what was there before the put: "missing" (the put makes the
    directory) or the names it held (an empty directory, or one --create writes into)."""
    from engine.broker.layout import StoreLayout

    layout = StoreLayout.of(cfg)
    if not cfg.root.exists():
        return "missing"
    if not cfg.root.is_dir() or layout.holds_store():
        return None
    return set(os.listdir(cfg.root))


def _remove_new_store(cfg, before) -> None:
    """Remove what a put that stored nothing made of a new store (its directories, checkpoint, abort marker,
    lock and config/): the directory is left as it was found."""
    import shutil

    from engine.broker.layout import StoreLayout

    layout = StoreLayout.of(cfg)
    made = [layout.consumequeue_dir, layout.index_dir, layout.config_dir, layout.checkpoint, layout.abort,
            layout.lock, *[d for d in layout.commitlog_dirs if d.parent == layout.root]]
    for p in made:
        if before != "missing" and p.name in before:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                p.unlink()
            except OSError:
                pass
    if before == "missing":
        try:
            cfg.root.rmdir()  # only when empty: nothing of anyone else's is removed
        except OSError:
            pass
