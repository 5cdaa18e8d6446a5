"""The expert-review round trip against a real Label Studio (the version scripts/test pins).

Starts Label Studio on a loopback port with a user token made at start-up, creates a project
with the labeling configuration `review export` writes, imports its tasks, answers them through
the REST API as two reviewers (from the sample's truth, with some disagreement, a skipped task
and a changed answer), exports the annotations as JSON, and runs `review import` and `eval` on
them. The server and every process it started are stopped at the end, whatever happens.

Skipped unless BPALS_LABEL_STUDIO names the `label-studio` executable.
"""
import csv
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from helpers import free_port, sample_release

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("BPALS_BIN", os.path.join(ROOT, "target", "debug", "bpals-release"))
LABEL_STUDIO = os.environ.get("BPALS_LABEL_STUDIO")
SAMPLE = os.path.join(ROOT, "fixtures", "sample")
TOKEN = "bpals-test-token-0123456789"
START_TIMEOUT_S = 240

pytestmark = pytest.mark.skipif(not LABEL_STUDIO, reason="BPALS_LABEL_STUDIO (the label-studio executable) is not set")


class LabelStudio:
    """A Label Studio server in its own process group, so that stopping it stops its children."""

    def __init__(self, data_dir, document_root):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ,
                   LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN="true",
                   LABEL_STUDIO_BASE_DATA_DIR=str(data_dir),
                   LABEL_STUDIO_LOCAL_FILES_SERVING_ENABLED="true",
                   LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT=document_root)
        self.log = open(os.path.join(data_dir, "server.log"), "wb")
        self.proc = subprocess.Popen(
            [LABEL_STUDIO, "start", "--port", str(self.port), "--no-browser", "--internal-host", "127.0.0.1",
             "--username", "reviewer1@example.org", "--password", "bpals-test-password", "--user-token", TOKEN],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_until_up(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"label-studio exited with {self.proc.returncode}; see {self.log.name}")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(1)
        raise TimeoutError(f"label-studio not up after {START_TIMEOUT_S} s; see {self.log.name}")

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, method=method, data=data,
                                     headers={"Authorization": f"Token {TOKEN}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                text = r.read()
                return json.loads(text) if text else None
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{method} {path}: HTTP {e.code}: {e.read()[:500]!r}") from None

    def stop(self):
        """Stops the server and everything in its process group: TERM, then KILL."""
        pgid = self.proc.pid
        for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and group_alive(pgid):
                try:
                    self.proc.wait(timeout=0.2)
                except subprocess.TimeoutExpired:
                    pass
            if not group_alive(pgid):
                break
        self.log.close()
        return not group_alive(pgid)


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def bpals(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BPALS_NIH")}
    done = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, f"bpals-release {' '.join(map(str, args))}:\n{done.stderr}"
    return done.stdout


def sample_truth():
    with open(os.path.join(SAMPLE, "truth.csv")) as f:
        return {(r["image_index"], r["label"]): r["truth"] == "1" for r in csv.DictReader(f)}


def choice(i, value):
    return {"from_name": f"answer_{i}", "to_name": "image", "type": "choices", "value": {"choices": [value]}}


def test_the_round_trip_through_label_studio(tmp_path, tmp_path_factory):
    release = sample_release("s1a", tmp_path_factory)
    plan = tmp_path / "plan.json"
    bpals("review", "plan", release, "--budget", "10%", "--out", plan)
    export_dir = tmp_path / "ls"
    bpals("review", "export", release, "--plan", plan, "--images", os.path.join(SAMPLE, "images"),
          "--document-root", SAMPLE, "--out", export_dir)
    tasks = json.loads((export_dir / "tasks.json").read_text())
    config = (export_dir / "labeling-config.xml").read_text()
    truth = sample_truth()

    data_dir = tmp_path / "label-studio"
    data_dir.mkdir()
    server = LabelStudio(data_dir, SAMPLE)
    try:
        server.wait_until_up()
        project = server.call("POST", "/api/projects", {"title": "CXR14-BPALS review", "label_config": config})
        pid = project["id"]
        imported = server.call("POST", f"/api/projects/{pid}/import", tasks)
        assert imported["task_count"] == len(tasks)
        # The images are served from the sample's folder once a local storage names it.
        server.call("POST", "/api/storages/localfiles", {"project": pid, "path": os.path.join(SAMPLE, "images"),
                                                          "title": "sample images", "use_blob_urls": False})
        # The first task's image, fetched by the URL the export wrote, as the labeling page does.
        req = urllib.request.Request(server.base + tasks[0]["data"]["image"], headers={"Authorization": f"Token {TOKEN}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200 and r.read(8) == b"\x89PNG\r\n\x1a\n"
        listed = server.call("GET", f"/api/tasks?project={pid}&page_size={len(tasks) + 10}")
        ls_tasks = listed["tasks"] if isinstance(listed, dict) else listed
        assert len(ls_tasks) == len(tasks)
        second = server.call("POST", "/api/users/", {"username": "reviewer2", "email": "reviewer2@example.org",
                                                      "first_name": "Second", "last_name": "Reviewer"})

        # Reviewer 1 answers the truth; reviewer 2 too, but says the opposite on every sixth task's
        # first question and "uncertain" on every ninth task's, and skips one task.
        for n, task in enumerate(sorted(ls_tasks, key=lambda t: t["id"])):
            data = task["data"]
            answers = ["present" if truth[(data["image_index"], q["label"])] else "absent" for q in data["questions"]]
            first = server.call("POST", f"/api/tasks/{task['id']}/annotations",
                                {"result": [choice(i, a) for i, a in enumerate(answers)]})
            if n == 0:
                # Reviewer 1 changes an answer and then changes it back.
                flipped = ["uncertain"] + answers[1:]
                server.call("PATCH", f"/api/annotations/{first['id']}", {"result": [choice(i, a) for i, a in enumerate(flipped)]})
                server.call("PATCH", f"/api/annotations/{first['id']}", {"result": [choice(i, a) for i, a in enumerate(answers)]})
            if n == 3:
                server.call("POST", f"/api/tasks/{task['id']}/annotations?was_cancelled=1",
                            {"result": [], "completed_by": second["id"]})
                continue
            theirs = list(answers)
            if n % 6 == 1:
                theirs[0] = "absent" if theirs[0] == "present" else "present"
            elif n % 9 == 2:
                theirs[0] = "uncertain"
            server.call("POST", f"/api/tasks/{task['id']}/annotations",
                        {"result": [choice(i, a) for i, a in enumerate(theirs)], "completed_by": second["id"]})

        exported = server.call("GET", f"/api/projects/{pid}/export?exportType=JSON")
    finally:
        assert server.stop(), "label-studio left processes behind"

    export_file = tmp_path / "export.json"
    export_file.write_text(json.dumps(exported))
    gold = tmp_path / "gold.csv"
    report = json.loads(bpals("review", "import", export_file, "--plan", plan, "--out", gold, "--json"))
    assert report["tasks"] == len(tasks)
    assert len(report["reviewers"]) == 2, report["reviewers"]
    assert report["cancelled_annotations"] == 1
    assert report["tied_rows"] >= 1
    assert report["agreement"]["rows"] > 0 and report["agreement"]["fleiss_kappa"] is not None
    with open(gold) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == report["gold_rows"] > 0
    for r in rows:
        assert (r["value"] == "1") == truth[(r["image_index"], r["label"])], r

    result = json.loads(bpals("eval", release, "--gold", gold, "--review-plan", plan))
    review = result["review"]
    assert review["targeted"]["reviewed"] > 0 and review["control"]["reviewed"] > 0
    assert review["targeted"]["errors_per_100"] > review["control"]["errors_per_100"]
