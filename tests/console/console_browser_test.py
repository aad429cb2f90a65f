#!/usr/bin/python3
"""The operator console in a real browser: Debian's Chromium, headless, driven by Selenium through
Debian's chromium-driver (nothing downloads a browser).

Against a real `airlock serve` (loopback TCP, the agent's and the operator's tokens), this test
opens the console, is refused with the agent's token and let in with the operator's, sees a session
the test opened, watches a refused action appear without reloading, sees a tool's output tail, a
command whose argv holds markup shown literally with no script run, approves a held call with a
click, checks that a page of another site cannot kill a session, and kills a running tool with the
kill switch: the tool's process is gone from the host.

Usage: console_browser_test.py AIRLOCK [--screenshot PNG]
Exits 77 (skipped) naming what is missing when Chromium, chromium-driver or Selenium is absent,
unless AIRLOCK_REQUIRE_ALL_TIERS=1 (CI), where a missing one fails.
"""
import argparse
import http.client
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77
CHROMIUM = "/usr/bin/chromium"
DRIVER = "/usr/bin/chromedriver"
AGENT_TOKEN = "agent-token-0123456789abcdef"
OPERATOR_TOKEN = "operator-token-0123456789abcdef"
XSS_IMG = '<img src=x onerror="window.__pwned=1">'
XSS_SCRIPT = "</script><script>window.__pwned=2</script>"
LONG_SLEEP = "4242.5"  # the killed tool's argv, to find its process on the host
WAIT = 30  # seconds any one thing may take to show before the test fails (never asserted as a timing)


def missing_browser():
    for path, package in ((CHROMIUM, "chromium"), (DRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            return f"{path} (Debian package {package})"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "the selenium module (Debian package python3-selenium)"
    return None


class Api:
    """One of the server's clients over loopback TCP, with a bearer token."""

    def __init__(self, port, token):
        self.port, self.token = port, token

    def call(self, method, path, body=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        conn.request(method, path, json.dumps(body) if body is not None else None, headers)
        reply = conn.getresponse()
        data = reply.read()
        conn.close()
        return reply.status, json.loads(data) if data else None


def processes(argv):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().split(b"\0")[:-1] == [a.encode() for a in argv]:
                    found.append(int(pid))
        except OSError:
            pass
    return found


RETRY_ON = ()  # set to Selenium's stale-element error once Selenium is imported


def until(what, check, seconds=WAIT):
    """Polls check() until it returns something true; fails the test naming `what` otherwise."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            got = check()
        except RETRY_ON:  # an element redrawn while it was read: read again
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)


def expect(cond, message):
    if not cond:
        raise AssertionError(message)


class AttackerPage(http.server.BaseHTTPRequestHandler):
    """Another site the operator's browser visits: it tries to kill a session without the token."""

    target = ""

    def do_GET(self):
        page = f"""<!doctype html><title>another site</title>
<form id=f method=POST action="{self.target}"></form>
<script>
fetch("{self.target}", {{method: "POST", mode: "no-cors", credentials: "include"}})
  .finally(() => {{ document.title = "fetched"; document.getElementById("f").submit(); }});
</script>"""
        body = page.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("airlock")
    ap.add_argument("--screenshot", help="save a screenshot of the console with a few sessions here")
    args = ap.parse_args()

    why = missing_browser()
    if why:
        if os.environ.get("AIRLOCK_REQUIRE_ALL_TIERS") == "1":
            print(f"FAIL: the console's browser test needs {why} (scripts/install-deps installs it)")
            return 1
        print(f"SKIP: the console's browser test needs {why}")
        return SKIP
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.common.exceptions import StaleElementReferenceException
    global RETRY_ON
    RETRY_ON = (StaleElementReferenceException,)

    tmp = tempfile.mkdtemp(prefix="airlock-console-")
    server = driver = attacker = None
    try:
        os.chmod(tmp, 0o755)
        workspace = os.path.join(tmp, "workspace")
        os.makedirs(os.path.join(workspace, "src"))
        with open(os.path.join(workspace, "src", "app.py"), "w") as f:
            f.write("print('hi')\n")
        tokens = {}
        for name, token in (("agent", AGENT_TOKEN), ("operator", OPERATOR_TOKEN)):
            tokens[name] = os.path.join(tmp, name + ".token")
            fd = os.open(tokens[name], os.O_WRONLY | os.O_CREAT, 0o600)
            os.write(fd, (token + "\n").encode())
            os.close(fd)
        err = open(os.path.join(tmp, "serve.err"), "w")
        server = subprocess.Popen(
            [args.airlock, "--state-dir", os.path.join(tmp, "state"), "serve", "--listen", "127.0.0.1:0",
             "--token-file", tokens["agent"], "--operator-token-file", tokens["operator"]],
            stdout=subprocess.PIPE, stderr=err, text=True,
            env=dict(os.environ, AIRLOCK_CACHE_DIR=os.path.join(tmp, "cache")))  # no machine's path on the page
        line = server.stdout.readline()
        expect(line, "airlock serve did not start: " + open(err.name).read())
        port = int(json.loads(line)["listening"]["tcp"].rsplit(":", 1)[1])
        agent, operator = Api(port, AGENT_TOKEN), Api(port, OPERATOR_TOKEN)

        def policy(task, tools=None):
            return {"schema_version": "airlock.task_policy.v1", "task_id": task, "workspace": workspace,
                    "readable": ["src"],
                    "tools": tools or [{"name": "sh", "argv": ["/bin/sh", "-c"], "allow_args": True,
                                        "timeout_seconds": 3600}],
                    "limits": {"session_budget_seconds": 3600, "command_timeout_seconds": 3600}}

        status, opened = agent.call("POST", "/v1/sessions", policy("fix-the-tests"))
        if status == 503 and os.environ.get("AIRLOCK_REQUIRE_ALL_TIERS") != "1":
            print("SKIP: no executor for the policy here: " + opened["error"]["message"])
            return SKIP
        expect(status == 201, f"open: {status} {opened}")
        sid = opened["session"]
        base = f"/v1/sessions/{sid}"
        # Two more sessions, so the console has a few to show.
        others = []
        for task in ("update-deps", "triage-issue-812"):
            status, o = agent.call("POST", "/v1/sessions", policy(task))
            expect(status == 201, f"open {task}: {status} {o}")
            others.append(o["session"])
            agent.call("POST", f"/v1/sessions/{o['session']}/read_file", {"path": "src/app.py"})
        agent.call("POST", f"/v1/sessions/{others[1]}/read_file", {"path": "/etc/shadow"})

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        # No connection of Chromium's own (updates, sync, QUIC probes): the test reaches only loopback.
        for a in ("--headless=new", "--disable-gpu", "--window-size=1500,1150", "--no-first-run", "--disable-quic",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  f"--user-data-dir={tmp}/chromium"):
            options.add_argument(a)
        if os.geteuid() == 0:
            options.add_argument("--no-sandbox")  # Chromium refuses to run its sandbox as root
        driver = webdriver.Chrome(service=Service(DRIVER, log_output=os.path.join(tmp, "driver.log")),
                                  options=options)
        driver.set_script_timeout(WAIT)
        ui = f"http://127.0.0.1:{port}/ui/"
        find = lambda css: driver.find_elements(By.CSS_SELECTOR, css)
        # The page redraws rows every second or two: read text in one script turn, never through
        # an element found earlier, which may be stale by the time it is read.
        texts = lambda css: driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]), e => e.innerText)", css)
        text = lambda css: (texts(css) or [""])[0]

        def click_until(button, done):
            """Clicks `button` until `done` (a selector that shows, or a check that holds): the
            page redraws its rows every second or two, so a button found may be gone when clicked,
            and a row that just moved takes no click for a second."""
            check = done if callable(done) else lambda: find(done)

            def attempt():
                got = check()
                if not got and find(button):
                    try:
                        find(button)[0].click()
                    except Exception:  # redrawn between find and click: try again
                        pass
                    time.sleep(0.2)
                    got = check()
                return got
            got = until(f"{done} after clicking {button}", attempt)
            return got[0] if isinstance(got, list) else got

        # No token yet: the login form. The agent's token is refused; the operator's lets in.
        driver.get(ui)
        until("the login form", lambda: driver.find_element(By.ID, "login").is_displayed())
        driver.find_element(By.ID, "token").send_keys(AGENT_TOKEN)
        driver.find_element(By.CSS_SELECTOR, "#login-form button").click()
        until("the agent's token refused", lambda: "not this server's operator token" in
              driver.find_element(By.ID, "login-error").text)
        expect(not driver.find_element(By.ID, "console").is_displayed(), "the agent's token opened the console")
        driver.find_element(By.ID, "token").send_keys(OPERATOR_TOKEN)
        driver.find_element(By.CSS_SELECTOR, "#login-form button").click()
        until("the session the test opened", lambda: find(f'#sessions tr[data-session="{sid}"]'))
        expect(driver.get_cookies() == [], "the console set a cookie")
        expect(OPERATOR_TOKEN not in driver.current_url, "the token is in the URL")
        kept = driver.execute_script("return sessionStorage.getItem('airlock.operator_token')")
        expect(kept == OPERATOR_TOKEN, "the token is not in the tab's session storage")
        until("the host's tiers", lambda: find('#executors tr[data-executor="namespaces"]'))

        # The session's timeline, then a refusal that appears without a reload.
        click_until(f'#sessions tr[data-session="{sid}"] button.link',
                    lambda: text("#timeline-session") == sid)
        until("session.open in the timeline", lambda: find('#timeline li[data-kind="session.open"]'))
        until("the chain verifies", lambda: "verifies" in text("#chain"))
        driver.execute_script("window.__marker = 'no reload'")
        t0 = time.monotonic()
        status, _ = agent.call("POST", base + "/read_file", {"path": "../../etc/passwd"})
        expect(status == 403, f"the refused read answered {status}")
        refused = until("the refused read in the timeline",
                        lambda: [t for t in texts("#timeline li.refused") if "AIRLOCK_PATH_DENIED" in t])
        print(f"a refused action appeared in the console {time.monotonic() - t0:.3f} s after it was answered")
        expect("../../etc/passwd" in refused[0], refused[0])
        expect(driver.execute_script("return window.__marker") == "no reload", "the page reloaded")

        # A tool's exit and output tail; markup in an argv and an output shown as text, run as nothing.
        script = f'printf "%s\\n" \'{XSS_IMG}\'; echo \'{XSS_SCRIPT}\' >&2; exit 3'
        status, ran = agent.call("POST", base + "/run_tool", {"tool": "sh", "args": [script]})
        expect(status == 200, f"run_tool: {status} {ran}")
        ran_li = '#timeline li[data-kind="run_tool"]'
        until("the tool run's output tail in the timeline", lambda: texts(ran_li + ' pre[data-stream="stdout"]'))
        whole = text(ran_li)
        expect(XSS_IMG in text(ran_li + " .detail"), whole)
        expect(text(ran_li + ' pre[data-stream="stdout"]').strip() == XSS_IMG, whole)
        expect(text(ran_li + ' pre[data-stream="stderr"]').strip() == XSS_SCRIPT, whole)
        expect("exit 3" in whole, whole)
        expect(find("#timeline img") == [] and find("#timeline script") == [], "markup from the agent became elements")
        expect(driver.execute_script("return window.__pwned === undefined"), "the agent's script ran")

        # A call held for approval: approved with a click, then it runs once.
        deploy = [{"name": "deploy", "protocol": "json", "approval": "required",
                   "argv": ["/bin/sh", "-c", "read line; printf '{\"deployed\": %s}' \"$line\""]}]
        status, held_session = agent.call("POST", "/v1/sessions", policy("release", deploy))
        expect(status == 201, f"open release: {held_session}")
        held_base = f"/v1/sessions/{held_session['session']}"
        status, held = agent.call("POST", held_base + "/run_tool", {"tool": "deploy", "args": {"version": "1.2"}})
        expect(status == 403 and held["error"]["code"] == "AIRLOCK_APPROVAL_REQUIRED", f"{status} {held}")
        request = held["error"]["facts"]["approval_id"]
        row = f'#approvals tr[data-approval="{request}"]'
        row_text = until("the pending approval", lambda: texts(row))[0]
        expect("deploy" in row_text and '"version": "1.2"' in row_text, row_text)
        # The agent's next held call goes below: the row the operator is reading does not move.
        # Measured from the top of the approvals table: what moves above it (the sessions list gains
        # a row as the agent works) is not the approvals list reordering.
        top_of = lambda css: driver.execute_script(
            "const e = document.querySelector(arguments[0]), t = document.querySelector('#approvals');"
            "return e && t && e.getBoundingClientRect().top - t.getBoundingClientRect().top", css)
        top = top_of(row)
        status, other = agent.call("POST", held_base + "/run_tool", {"tool": "deploy", "args": {"version": "6.6.6"}})
        expect(status == 403, f"{status} {other}")
        later = other["error"]["facts"]["approval_id"]
        until("the second held call", lambda: find(f'#approvals tr[data-approval="{later}"]'))
        expect(top_of(f'#approvals tr[data-approval="{later}"]') > top, "a new request was put above the one being read")
        expect(top_of(row) == top, "the row being read moved")
        click_until(f'button[data-answer="{request}"]', f'button[data-approve-confirm="{request}"]')
        expect('Answer exactly this call: deploy {"version":"1.2"}' in
               text(row), "the confirmation does not name the call")
        click_until(f'button[data-approve-confirm="{request}"]',
                    lambda: not find(f'#approvals tr[data-approval="{request}"]'))
        click_until(f'button[data-answer="{later}"]', f'button[data-deny-confirm="{later}"]')
        click_until(f'button[data-deny-confirm="{later}"]', lambda: not find(f'#approvals tr[data-approval="{later}"]'))
        status, answered = operator.call("GET", "/v1/approvals?all=1")
        by_id = {a["id"]: a["status"] for a in answered["approvals"]}
        expect(by_id.get(request) == "approved" and by_id.get(later) == "denied", f"{by_id}")
        status, deployed = agent.call("POST", held_base + "/run_tool", {"tool": "deploy", "args": {"version": "1.2"}})
        expect(status == 200 and deployed["approval_id"] == request, f"{status} {deployed}")

        # A page of another site cannot kill a session: it has no token to send.
        AttackerPage.target = f"http://127.0.0.1:{port}/v1/console/sessions/{sid}/kill"
        attacker = http.server.ThreadingHTTPServer(("127.0.0.1", 0), AttackerPage)
        threading.Thread(target=attacker.serve_forever, daemon=True).start()
        driver.get(f"http://127.0.0.1:{attacker.server_address[1]}/evil")
        # Its fetch ends before its form posts, and the form's answer is the page shown: both arrived.
        until("the other site's fetch and form post answered", lambda: driver.current_url.endswith("/kill"))
        expect("AIRLOCK_UNAUTHORIZED" in driver.find_element(By.TAG_NAME, "body").text, driver.page_source[:500])
        status, listed = operator.call("GET", "/v1/console/sessions")
        expect(any(s["session"] == sid and not s["killed"] for s in listed["sessions"]),
               "another site's request killed the session")

        # The kill switch on a running tool: confirmed, the tool's process is gone from the host.
        driver.get(ui)  # the token is still in this tab's session storage
        until("the console again", lambda: find(f'#sessions tr[data-session="{sid}"]'))
        click_until(f'#sessions tr[data-session="{sid}"] button.link',
                    lambda: text("#timeline-session") == sid)
        long_run = {}

        def run_long():
            long_run["reply"] = agent.call("POST", base + "/run_tool", {"tool": "sh", "args": [f"exec /bin/sleep {LONG_SLEEP}"]})

        runner = threading.Thread(target=run_long)
        runner.start()
        until("the long tool running on the host", lambda: processes(["/bin/sleep", LONG_SLEEP]))
        until("the console showing it running",
              lambda: "run_tool for" in text(f'#sessions tr[data-session="{sid}"] td[data-field="running"]'))
        if args.screenshot:
            driver.save_screenshot(args.screenshot)
            print("screenshot:", args.screenshot)
        click_until(f'button[data-kill="{sid}"]', f'button[data-kill-confirm="{sid}"]')
        click_until(f'button[data-kill-confirm="{sid}"]', lambda: not find(f'#sessions tr[data-session="{sid}"]'))
        runner.join(WAIT)
        expect(not runner.is_alive(), "the running tool's request never answered")
        status, body = long_run["reply"]
        expect(status == 409 and body["error"]["code"] == "AIRLOCK_SESSION_KILLED", f"{status} {body}")
        until("the tool's processes gone from the host", lambda: not processes(["/bin/sleep", LONG_SLEEP]))
        ended = until("the session listed as killed",
                      lambda: [t for t in texts(f'#ended tr[data-session="{sid}"]') if "killed" in t])
        expect("operator console" in ended[0], ended[0])
        until("the console showing nothing running in it", lambda: text(
            f'#ended tr[data-session="{sid}"] td[data-field="running"]') == "nothing running")
        expect(not find(f'#sessions tr[data-session="{sid}"]'), "the killed session is still listed as open")
        until("the timeline's close", lambda: [t for t in texts('#timeline li[data-kind="session.close"]')
                                               if "killed" in t])
        until("the timeline marked killed", lambda: "killed" in text("#timeline-state"))
        print("PASS: the console showed, refused, approved and killed as it should")
        return 0
    finally:
        if driver is not None:
            driver.quit()
        if attacker is not None:
            attacker.shutdown()
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print(f"FAIL: {e}")
        sys.exit(1)
