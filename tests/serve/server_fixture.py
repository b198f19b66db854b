"""Starts a server binary on 127.0.0.1 with a free port and stops it after
the tests (bounded waits everywhere)."""
import os
import signal
import subprocess
import time
import urllib.request


class ServerProcess:
    def __init__(self, argv, port_file, log_path):
        self.log = open(log_path, "wb")
        if os.path.exists(port_file):
            os.remove(port_file)
        self.proc = subprocess.Popen(argv, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        # Writers rename the file into place; a port that does not parse yet
        # is still waited for rather than read half written.
        self.port = None
        while self.port is None:
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise RuntimeError("server did not start: " +
                                   open(log_path, errors="replace").read())
            if os.path.exists(port_file):
                text = open(port_file).read().strip()
                if text.isdigit():
                    self.port = int(text)
                    break
            time.sleep(0.05)
        self.base = f"http://127.0.0.1:{self.port}"

    def get(self, path, timeout=10):
        with urllib.request.urlopen(self.base + path, timeout=timeout) as r:
            return r.status, r.read().decode()

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()
