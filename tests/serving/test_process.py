"""kbert.serving.process: starting kbert-serve and waiting for it, bounded, with its log on failure.

These use small stand-in programs for the binary (`command=`), so they run in
a second; tests/serving/test_server.py and the others start the real one.
"""

import os
import subprocess
import sys

import pytest

from kbert.serving import process
from tests.conftest import REPO

# A stand-in server: logs to stderr, prints the ready line, then serves until SIGTERM.
# As kbert/bin/serve.py, the SIGTERM handler is in place before the ready line.
READY = """
import signal, sys, time
def stop(*_):
    print("kbert-serve: stopped", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
sys.stderr.write("loading models\\n"); sys.stderr.flush()
print("kbert-serve: serving sst2 version 1 on " + " ".join(sys.argv[1:3]), flush=True)
while True:
    time.sleep(0.1)
"""


def _stand_in(script):
    return [sys.executable, "-c", script]


def test_start_waits_for_the_ready_line_and_stop_collects_the_rest(tmp_path):
    log = str(tmp_path / "serve.log")
    with process.start_server(["--model_name=sst2"], 30, command=_stand_in(READY), grpc_port=1234,
                              rest_port=0, log_path=log) as server:
        assert server.ready_line == "kbert-serve: serving sst2 version 1 on --port=1234 --rest_api_port=0"
        assert server.grpc_address == "127.0.0.1:1234"
        assert server.process.poll() is None
    assert server.process.returncode == 0
    assert server.stdout_tail == "kbert-serve: stopped\n"
    assert server.log_text() == "loading models\n"
    assert server.log_path == log


def test_ports_are_picked_free_and_passed_first():
    assert process.server_command(["--model_name=a"], 1, 2) == [
        sys.executable, "-m", "kbert.bin.serve", "--port=1", "--rest_api_port=2", "--model_name=a"]
    with process.start_server([], 30, command=_stand_in(READY)) as server:
        assert server.grpc_port > 0 and server.rest_port > 0 and server.grpc_port != server.rest_port
        assert server.log_path.endswith(".log") and os.path.basename(server.log_path).startswith("kbert-serve-")
    os.remove(server.log_path)


def test_an_exit_before_ready_raises_with_the_end_of_the_log(tmp_path):
    script = "import sys; sys.stderr.write('x' * 5000 + 'error: no such model\\n'); sys.exit(2)"
    with pytest.raises(process.ServerStartError, match=r"exited with status 2 before it was ready") as error:
        process.start_server([], 30, command=_stand_in(script), log_path=str(tmp_path / "serve.log"))
    assert error.value.returncode == 2
    assert error.value.tail.endswith("error: no such model\n")
    assert len(error.value.tail) == process.LOG_TAIL_CHARS
    assert str(error.value).endswith("error: no such model\n")
    assert "serve.log" in str(error.value)


def test_no_ready_line_in_time_stops_the_server_and_raises(tmp_path):
    script = "import sys, time; sys.stderr.write('still loading\\n'); sys.stderr.flush(); time.sleep(600)"
    with pytest.raises(process.ServerStartError, match=r"did not print its ready line in 2 s") as error:
        process.start_server([], 2, command=_stand_in(script), log_path=str(tmp_path / "serve.log"))
    assert error.value.returncode is None
    assert "still loading" in error.value.tail


def test_importing_it_loads_no_tensorflow():
    # tools/demo.py imports it; TensorFlow's start-up lines would change the demo's output.
    code = "import sys, kbert.serving.process; print('tensorflow' in sys.modules, 'grpc' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, PYTHONPATH=REPO), cwd=REPO)
    assert result.stdout.strip() == "False False", result.stderr
