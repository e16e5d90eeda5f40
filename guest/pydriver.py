# The Python session driver: one interpreter that keeps its variables
# between calls. The host runs it through an engine exec (python3 -u -c)
# and speaks JSON lines with it on the exec's stdin and stdout:
#
#   host -> driver  {"op":"run","id":N,"code":"...","limit":BYTES}
#                   {"op":"interrupt","id":N}
#                   {"op":"peek","id":N}
#   driver -> host  {"op":"ready","pid":P,"version":"3.11.2"}
#                   {"op":"progress","id":N,"total":BYTES,"newest":"..."}
#                   {"op":"result","id":N,...}
#
# The user's code never sees those two pipes: it runs with stdin on
# /dev/null and stdout and stderr on pipes of its own per call, read by
# threads that keep the first and the last limit/2 bytes of each.
import ast
import asyncio
import builtins
import inspect
import json
import linecache
import os
import queue
import signal
import stat
import sys
import threading
import time
import traceback
import types

PROTO_IN = os.dup(0)  # os.dup gives descriptors children do not inherit
PROTO_OUT = os.dup(1)
# The exec's stderr is held open, unused, for the driver's life: a runtime
# may end the exec, its stdin with it, once either of its outputs closes
# (containerd, under a kubelet, does).
PROTO_ERR = os.dup(2)
DEVNULL = os.open(os.devnull, os.O_RDWR)
os.dup2(DEVNULL, 0)
os.dup2(DEVNULL, 1)
os.dup2(DEVNULL, 2)
sys.stdin = open(os.devnull)
os.environ.setdefault("MPLBACKEND", "Agg")
# PNG files the code writes here come back as images of its call.
OUTPUTS = os.environ.setdefault("SANDBOX_OUTPUTS", "/tmp/outputs")
try:
    os.makedirs(OUTPUTS, exist_ok=True)
except OSError:
    pass

PID = os.getpid()
DRIVER_FILE = sys._getframe().f_code.co_filename  # "<string>", as python3 -c names it
MAIN = threading.main_thread().ident
VALUE_LIMIT = 20000
TRACE_LIMIT = 20000
KEEP_CELLS = 200
MAX_IMAGES = 8
MAX_IMAGE = 1 << 20

send_lock = threading.Lock()


def send(obj):
    data = (json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8", "replace")
    with send_lock:
        view = memoryview(data)
        while view:
            view = view[os.write(PROTO_OUT, view):]


class State:
    running = None  # the id of the call whose code runs now
    output = None  # its stdout and stderr captures
    lock = threading.Lock()


def on_sigint(signum, frame):
    # Only the user's code is interrupted; a signal that arrives as the
    # driver itself runs (the code just ended) is dropped.
    if State.running is not None:
        raise KeyboardInterrupt
signal.signal(signal.SIGINT, on_sigint)

calls = queue.SimpleQueue()


def read_requests():
    f = os.fdopen(PROTO_IN, "rb")
    while True:
        line = f.readline()
        if not line:
            os._exit(0)  # the host is gone
        try:
            req = json.loads(line)
        except ValueError:
            continue
        if not isinstance(req, dict):
            continue
        if req.get("op") == "interrupt":
            with State.lock:
                if State.running is not None and State.running == req.get("id"):
                    signal.pthread_kill(MAIN, signal.SIGINT)
        elif req.get("op") == "peek":
            with State.lock:
                if State.running is None or State.running != req.get("id") or State.output is None:
                    continue
                out, err = State.output
                newest = bytes(out.tail[-400:] if out.tail else out.head[-400:])
                total = out.total + err.total
            send({"op": "progress", "id": req.get("id"), "total": total, "newest": newest.decode("utf-8", "replace")})
        elif req.get("op") == "run":
            calls.put(req)


class Capture:
    def __init__(self, limit):
        self.half = max(1, limit // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, b):
        self.total += len(b)
        room = self.half - len(self.head)
        if room > 0:
            self.head += b[:room]
            b = b[room:]
        if b:
            self.tail += b
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def result(self):
        return {
            "head": self.head.decode("utf-8", "replace"),
            "tail": self.tail.decode("utf-8", "replace"),
            "total": self.total,
            "omitted": self.total - len(self.head) - len(self.tail),
        }


def pump(fd, cap, stop):
    """Reads a call's output into cap; once the call is over, what
    processes it left running still write is read and dropped (closing
    the pipe would kill them with SIGPIPE)."""
    try:
        while True:
            b = os.read(fd, 1 << 16)
            if not b:
                break
            if not stop.is_set():
                cap.add(b)
    except OSError:
        pass
    os.close(fd)


class Pump:
    """A thread that reads calls' output pipes, one at a time (pump):
    threads kept between calls, as starting two a call cost more than
    the rest of a small call. A pump still reading a pipe that processes
    the code left running hold is not waited for: the next call takes
    another."""

    idle = []
    lock = threading.Lock()
    KEEP = 4  # idle pumps kept; one more ends when its pipe does

    def __init__(self):
        self.jobs = queue.SimpleQueue()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while True:
            fd, cap, stop, done = self.jobs.get()
            try:
                pump(fd, cap, stop)
            finally:
                with Pump.lock:
                    keep = len(Pump.idle) < Pump.KEEP
                    if keep:
                        Pump.idle.append(self)
                done.set()
            if not keep:
                return

    @classmethod
    def read(cls, fd, cap, stop):
        """Reads fd into cap on a pump of its own; the event it returns
        is set once fd gave its end."""
        p = None
        with cls.lock:
            while cls.idle and p is None:
                p = cls.idle.pop()
                if not p.thread.is_alive():
                    p = None  # ended by the code: never handed a pipe again
        if p is None:
            p = cls()
        done = threading.Event()
        p.jobs.put((fd, cap, stop, done))
        return done


def bounded(s, limit):
    if len(s) <= limit:
        return s
    half = limit // 2
    return s[:half] + "\n… [%d characters omitted] …\n" % (len(s) - 2 * half) + s[-half:]


# The code's globals are a module of its own, registered as __main__ (so
# pickle finds the classes it defines), apart from the driver's.
user_main = types.ModuleType("__main__")
user_main.__dict__["__builtins__"] = builtins
sys.modules["__main__"] = user_main
namespace = user_main.__dict__
count = 0


def execute(req):
    global count
    count += 1
    name = "<cell %d>" % count
    code = req.get("code", "")
    if not isinstance(code, str):
        code = ""
    lines = code.splitlines(True)
    linecache.cache[name] = (len(code), None, lines, name)
    stale = "<cell %d>" % (count - KEEP_CELLS)
    linecache.cache.pop(stale, None)
    try:
        limit = max(1024, int(req.get("limit") or 16384))
    except (TypeError, ValueError):
        limit = 16384
    out, err = Capture(limit), Capture(limit)
    stop = threading.Event()
    os.dup2(DEVNULL, 0)  # the code may have closed it: no pipe of ours may land there
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    os.dup2(w1, 1)
    os.dup2(w2, 2)
    os.close(w1)
    os.close(w2)
    pumps = [Pump.read(r1, out, stop), Pump.read(r2, err, stop)]
    res = {"op": "result", "id": req.get("id"), "count": count}
    before = outputs_state()
    start = time.monotonic()
    images = []
    try:
        try:
            tree = ast.parse(code, name, "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
            body = compile(tree, name, "exec", flags=flags)
            tail = compile(last, name, "eval", flags=flags) if last is not None else None
            # From here on an interrupt reaches the code, its value's
            # repr and the drawing of its figures: all may take long.
            with State.lock:
                State.running = req.get("id")
                State.output = (out, err)
            run(body)
            if tail is not None:
                value = run(tail)
                if value is not None:
                    namespace["_"] = value
                    res["value"] = bounded(repr(value), VALUE_LIMIT)
            images = grab_figures(limit) or []
            images += grab_outputs(before, MAX_IMAGES - len(images), {i.get("data") for i in images})
        except BaseException as e:  # noqa: B036: the user's SystemExit and KeyboardInterrupt too
            if os.getpid() != PID:
                os._exit(0)  # a fork of the code's that got here
            res["error"] = describe(e)
            if isinstance(e, KeyboardInterrupt):
                res["interrupted"] = True
        finally:
            with State.lock:
                State.running = None
                State.output = None
    finally:
        if os.getpid() != PID:
            os._exit(0)
        for f in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                f.flush()
            except BaseException:
                pass
        os.dup2(DEVNULL, 1)
        os.dup2(DEVNULL, 2)
        deadline = time.monotonic() + 0.2
        for done in pumps:
            done.wait(max(0, deadline - time.monotonic()))
        stop.set()
    res["duration"] = time.monotonic() - start
    res["stdout"] = out.result()
    res["stderr"] = err.result()
    if images:
        res["images"] = images
    return res


def run(compiled):
    result = eval(compiled, namespace)
    if compiled.co_flags & inspect.CO_COROUTINE:
        loop = asyncio.new_event_loop()
        try:
            result = loop.run_until_complete(result)
        finally:
            loop.close()
    return result


def describe(e):
    """The exception for the result; what the code's own __str__ or
    __repr__ raises (an interrupt included) does not get out of here."""
    kind = type(e).__name__
    try:
        # The driver's own frames (its run() above the cell, its SIGINT
        # handler below it) are left out: the trace is the user's code.
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != DRIVER_FILE]
        text = "".join(traceback.format_list(frames))
        if text:
            text = "Traceback (most recent call last):\n" + text
        text += "".join(traceback.format_exception_only(type(e), e))
        if len(text) > TRACE_LIMIT:
            text = "… [%d characters omitted] …\n" % (len(text) - TRACE_LIMIT) + text[-TRACE_LIMIT:]
        return {"type": kind, "traceback": text}
    except BaseException as inner:
        return {"type": kind, "traceback": "%s (its message could not be shown: %s)\n" % (kind, type(inner).__name__)}


def grab_figures(limit):
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return None
    out = []
    try:
        import base64
        import io
        for num in plt.get_fignums()[:MAX_IMAGES]:
            fig = plt.figure(num)
            dpi = fig.dpi
            for _ in range(6):
                b = io.BytesIO()
                fig.savefig(b, format="png", dpi=dpi)
                data = b.getvalue()
                if len(data) <= MAX_IMAGE:
                    break
                dpi = dpi / 2
            else:
                out.append({"error": "figure %d is over 1 MiB as a PNG even at %g dpi: save it to a file" % (num, dpi)})
                continue
            out.append({"format": "png", "data": base64.b64encode(data).decode("ascii"),
                        "name": "figure-%d.png" % num})
        plt.close("all")
    except Exception as e:
        out.append({"error": "%s: %s" % (type(e).__name__, e)})
    return out


def png_entries():
    """The first 1000 PNG entries of OUTPUTS by name, or none."""
    try:
        with os.scandir(OUTPUTS) as it:
            entries = [e for e in it if e.name.lower().endswith(".png")]
    except OSError:
        return []
    return sorted(entries, key=lambda e: e.name)[:1000]


def stamp(entry):
    """What tells a rewritten file from the one seen before: a file's
    clock is the kernel's coarse one, so a time taken by the call cannot
    be compared with it."""
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode)


def outputs_state():
    """The PNG files in OUTPUTS before a call, by name."""
    return {e.name: stamp(e) for e in png_entries()}


def grab_outputs(before, room, seen=()):
    """The PNG files written into OUTPUTS during the call (new, or changed
    since `before`), each under MAX_IMAGE (a bigger one drawn smaller when
    Pillow is there)."""
    out = []
    skipped = 0
    for e in png_entries():
        st = stamp(e)
        if st is None or before.get(e.name) == st or not stat.S_ISREG(st[3]):
            continue
        if len(out) >= room:
            skipped += 1
            continue
        try:
            if st[2] > MAX_IMAGE:
                data = shrink(e.path)
                if data is None:
                    out.append({"error": "%s is over 1 MiB and could not be drawn smaller: download it" % e.path})
                    continue
            else:
                with open(e.path, "rb") as f:
                    data = f.read(MAX_IMAGE + 1)
        except Exception as err:
            out.append({"error": "%s: %s: %s" % (e.path, type(err).__name__, err)})
            continue
        import base64
        encoded = base64.b64encode(data).decode("ascii")
        if encoded in seen:
            continue  # a figure the call also saved here
        # Which version of the file it was, so that the server's next look
        # at the directory does not send it again.
        out.append({"format": "png", "data": encoded, "name": e.path,
                    "file": {"ino": st[0], "mtime_ns": st[1], "size": st[2]}})
    if skipped:
        out.append({"error": "%d more PNG files in %s were not attached (at most %d images a call)" % (skipped, OUTPUTS, MAX_IMAGES)})
    return out


def shrink(path):
    try:
        from PIL import Image
    except ImportError:
        return None
    import io
    with Image.open(path) as im:
        im.load()
        for scale in (2, 4, 8, 16, 32):
            small = im.copy()
            small.thumbnail((max(1, im.width // scale), max(1, im.height // scale)))
            b = io.BytesIO()
            small.save(b, "PNG", optimize=True)
            if b.tell() <= MAX_IMAGE:
                return b.getvalue()
    return None


def main():
    threading.Thread(target=read_requests, daemon=True).start()
    send({"op": "ready", "pid": PID, "version": "%d.%d.%d" % sys.version_info[:3]})
    while True:
        req = calls.get()
        try:
            res = execute(req)
        except BaseException as e:  # the driver's own failure: said, and the session goes on
            if os.getpid() != PID:
                os._exit(0)
            res = {"op": "result", "id": req.get("id"), "count": count, "error": describe(e)}
        send(res)


main()
