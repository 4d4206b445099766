"""Every rank checks in at the coordinator's address before JAX's client starts.

JAX's distributed client does not return an error when it cannot register with the
coordination service in time: a rank whose coordinator never listens, or rank 0
(which hosts the service) whose peers never come, is aborted (SIGABRT, "Terminating
process because the JAX distributed service detected fatal errors ...
DEADLINE_EXCEEDED") with a native stack dump. So :func:`check_in` meets the ranks
first over plain TCP, on the very address the coordination service will use:

* rank 0 listens there and waits until every other rank has said
  ``shardkit-join RANK NUM_PROCESSES``, then closes the port (for JAX's service to
  take) and answers ``go``; if the deadline passes first, it answers ``fail`` with
  the missing ranks, and raises;
* every other rank connects (retrying while nothing listens), says hello and waits
  for the answer; it raises when nothing listens before the deadline, on ``fail``, or
  when rank 0 goes away.

So with a rank or the coordinator missing, every rank that came raises
``RuntimeError`` within its ``initialization_timeout_seconds``; only once all of
them are there does JAX's client start, and its registration cannot time out then.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import time

__all__ = ["check_in", "reach"]

HELLO = "shardkit-join"
GO = "go"
FAIL = "fail"
# How often a rank retries a coordinator that does not listen yet.
_RETRY_SECONDS = 0.05
_MAX_LINE = 256


def _ranks_text(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def check_in(address: str, process_id: int, num_processes: int, *, timeout_seconds: float) -> None:
    """Returns once all ``num_processes`` ranks met at ``address`` (``host:port``).

    Raises:
      RuntimeError: a rank or the coordinator did not come within ``timeout_seconds``,
        or rank 0 could not listen on ``address``; the message says which.
    """
    if num_processes == 1:
        return
    host, _, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")  # an IPv6 literal, [::1]:1234
    deadline = time.monotonic() + timeout_seconds
    where = f"initialize(): rank {process_id} of {num_processes}"
    remedy = (
        "start every rank of the job (shardkit launch -n N starts them all), or wait "
        f"longer than initialization_timeout_seconds={timeout_seconds:g}"
    )
    if process_id == 0:
        _host(host, int(port), num_processes, deadline, where, timeout_seconds, remedy)
    else:
        _join(host, int(port), process_id, num_processes, deadline, where, timeout_seconds, remedy)


def _host(
    host: str,
    port: int,
    num_processes: int,
    deadline: float,
    where: str,
    timeout_seconds: float,
    remedy: str,
) -> None:
    try:
        server = socket.create_server((host, port))
    except OSError as e:
        raise RuntimeError(
            f"{where} cannot listen on the coordinator address {host}:{port}: {e.strerror}; "
            "another process holds the port (a job still running?): pick another port"
        ) from None
    joined: dict[int, socket.socket] = {}
    with selectors.DefaultSelector() as sel:
        sel.register(server, selectors.EVENT_READ)
        try:
            while len(joined) < num_processes - 1:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [r for r in range(1, num_processes) if r not in joined]
                    message = (
                        f"{where} waited {timeout_seconds:g} s at {host}:{port}, but "
                        f"{_ranks_text(missing)} never connected"
                    )
                    for conn in joined.values():
                        _send(conn, f"{FAIL} {_ranks_text(missing)} never connected to rank 0")
                    raise RuntimeError(f"{message}; {remedy}")
                for key, _ in sel.select(left):
                    if key.fileobj is server:
                        conn, _ = server.accept()
                        conn.setblocking(False)
                        sel.register(conn, selectors.EVENT_READ, bytearray())
                    else:
                        _read_hello(sel, key, joined, num_processes)
        except BaseException:
            for conn in joined.values():
                conn.close()
            raise
        finally:
            server.close()
            for key in list(sel.get_map().values()):
                if key.fileobj is not server and key.fileobj not in joined.values():
                    key.fileobj.close()  # type: ignore[union-attr]
    for conn in joined.values():
        _send(conn, GO)
    # The peers hang up first, so that no connection lingers on the coordinator's port
    # when JAX's service binds it.
    for conn in joined.values():
        conn.settimeout(max(0.0, min(1.0, deadline - time.monotonic())))
        with contextlib.suppress(OSError):
            conn.recv(1)
        conn.close()


def _read_hello(
    sel: selectors.BaseSelector,
    key: selectors.SelectorKey,
    joined: dict[int, socket.socket],
    num_processes: int,
) -> None:
    conn: socket.socket = key.fileobj  # type: ignore[assignment]
    buf: bytearray = key.data
    try:
        chunk = conn.recv(_MAX_LINE)
    except OSError:
        chunk = b""
    if not chunk:  # gone before the verdict: it counts as missing again
        sel.unregister(conn)
        for rank, other in list(joined.items()):
            if other is conn:
                del joined[rank]
        conn.close()
        return
    if conn in joined.values():
        return  # nothing more is expected from a rank that checked in
    buf += chunk
    if b"\n" not in buf:
        if len(buf) > _MAX_LINE:
            sel.unregister(conn)
            conn.close()  # not one of ours
        return
    words = buf.split(b"\n", 1)[0].decode("ascii", errors="replace").split()
    ok = len(words) == 3 and words[0] == HELLO and words[1].isdigit() and words[2].isdigit()
    if not ok:
        sel.unregister(conn)
        conn.close()  # not one of ours
        return
    rank, size = int(words[1]), int(words[2])
    if size != num_processes:
        refusal = f"rank 0 runs a job of {num_processes} processes, not {size}"
    elif not 0 < rank < num_processes:
        refusal = f"rank {rank} is not a rank of a job of {num_processes} processes"
    elif rank in joined:
        refusal = f"another process already joined as rank {rank}"
    else:
        joined[rank] = conn
        return
    _send(conn, f"{FAIL} {refusal}")
    sel.unregister(conn)
    conn.close()


def _join(
    host: str,
    port: int,
    process_id: int,
    num_processes: int,
    deadline: float,
    where: str,
    timeout_seconds: float,
    remedy: str,
) -> None:
    with _connect(host, port, deadline, where, timeout_seconds, remedy) as conn:
        try:
            _send(conn, f"{HELLO} {process_id} {num_processes}")
            conn.settimeout(max(0.01, deadline - time.monotonic()))
            answer = conn.makefile("r", encoding="ascii", errors="replace").readline().strip()
        except TimeoutError:
            raise RuntimeError(
                f"{where} reached the coordinator at {host}:{port}, but not every rank "
                f"joined within {timeout_seconds:g} s; {remedy}"
            ) from None
        except OSError as e:
            answer = f"{FAIL} {e.strerror or e}"
    if answer == GO:
        return
    if answer.startswith(FAIL):
        why = answer[len(FAIL) :].strip()
        raise RuntimeError(f"{where} cannot join the job at {host}:{port}: {why}; {remedy}")
    raise RuntimeError(
        f"{where}: the coordinator at {host}:{port} hung up before every rank joined "
        "(rank 0 ended, or another program holds that port); see rank 0's output"
    )


def _connect(
    host: str, port: int, deadline: float, where: str, timeout_seconds: float, remedy: str
) -> socket.socket:
    """A connection to ``host:port``, retried while nothing listens there, until ``deadline``."""
    reason = "nothing listens there"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(
                f"{where} found no coordinator at {host}:{port} within {timeout_seconds:g} s "
                f"({reason}). Rank 0 starts it: check that rank 0 runs and listens at that "
                f"address; {remedy}"
            )
        try:
            return socket.create_connection((host, port), timeout=min(left, 1.0))
        except OSError as e:
            reason = e.strerror or str(e)
            time.sleep(min(_RETRY_SECONDS, max(0.0, deadline - time.monotonic())))


def reach(address: str, process_id: int, num_processes: int, *, timeout_seconds: float) -> None:
    """Returns once something listens at the coordinator's ``address`` (ranks above 0).

    In a cluster (SLURM, Open MPI) JAX's coordination service itself listens there, so
    the ranks cannot meet first as :func:`check_in` does; but a rank whose coordinator
    never comes raises ``RuntimeError`` within ``timeout_seconds`` here, where JAX's
    client would abort the process after its own, longer, timeout.
    """
    if process_id == 0 or num_processes == 1:
        return
    host, _, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    where = f"initialize(): rank {process_id} of {num_processes}"
    remedy = (
        "check that the job's rank 0 started, or wait longer than "
        f"initialization_timeout_seconds={timeout_seconds:g}"
    )
    deadline = time.monotonic() + timeout_seconds
    _connect(host, int(port), deadline, where, timeout_seconds, remedy).close()


def _send(conn: socket.socket, line: str) -> None:
    with contextlib.suppress(OSError):
        conn.setblocking(True)
        conn.sendall(f"{line}\n".encode("ascii"))
