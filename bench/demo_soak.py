"""The embedded demo under steady use (`make demo-soak`; not part of `make test` or CI).

Starts `scripts/demo` as a newcomer does (SQLite, the filesystem broker, a Celery worker and
beat, the local Stripe server, gunicorn), then for --minutes drives it at once with
- an API client (tom, Nimbus Research's admin, by token): lists and reads offers, bids at the
  reserve and withdraws, buys one unit at the buy-now price, submits tiny jobs on the team's
  active allocation and follows them to their end and their output, tops the wallet up
  (paid on the local Stripe server as Stripe.js would) and reads the ledger;
- a Chromium browser (Playwright; mia, a member, and tom): logs in and walks the dashboard, the
  offers and an offer, the jobs list and a job, the money page, and the notifications.
When the demo stops, that is a crash: its output's end is kept, and the demo is started again
so that the run goes on. Prints, and writes to var/soak/report.json: requests by kind, answers
by status, errors (5xx, refused connections, browser page errors), crashes."""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import stripe

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "computeshare-demo"  # noqa: S105 - the demo seed's
API = "/api/v1"
ENDED = {"completed", "failed", "cancelled", "timeout", "out_of_memory", "node_fail", "preempted"}
rng = random.Random()  # noqa: S311 - which offer or page next: a simulation's choice


class Tally:
    """Counts shared by the two clients' threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: collections.Counter[str] = collections.Counter()
        self.statuses: collections.Counter[str] = collections.Counter()
        self.errors: list[str] = []
        # Refusals (4xx) by request kind and error code: expected ones (an offer that closed)
        # and any that show a mistake of the client or the demo.
        self.refusals: collections.Counter[str] = collections.Counter()
        self.crashes: list[dict[str, Any]] = []
        self.jobs_ended: collections.Counter[str] = collections.Counter()
        self.top_ups: collections.Counter[str] = collections.Counter()

    def answer(self, kind: str, status: int | str, detail: str = "") -> None:
        with self.lock:
            self.requests[kind] += 1
            self.statuses[str(status)] += 1
            if not isinstance(status, int) or status >= 500:
                self.errors.append(f"{now()} {kind}: {status} {detail[:300]}")
            elif status >= 400:
                self.refusals[f"{kind} {status} {error_code(detail)}"] += 1

    def error(self, text: str) -> None:
        with self.lock:
            self.errors.append(f"{now()} {text[:500]}")


def error_code(body: str) -> str:
    try:
        return str(json.loads(body).get("code", ""))
    except (ValueError, AttributeError):
        return ""


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S")


class Demo:
    """scripts/demo in its own process group, started again after a crash."""

    def __init__(self, port: int, stripe_port: int, tally: Tally) -> None:
        self.port, self.stripe_port, self.tally = port, stripe_port, tally
        self.base = f"http://127.0.0.1:{port}"
        self.log_path = ROOT / "var" / "soak" / "demo.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.stopping = False

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        environment = {
            key: value
            for key, value in os.environ.items()
            if key not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")
        }
        environment.update(DEMO_PORT=str(self.port), LOCALSTRIPE_PORT=str(self.stripe_port))
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [str(ROOT / "scripts" / "demo")],
                cwd=ROOT,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError(f"the demo did not start:\n{self.tail()}")
            time.sleep(1)
        raise RuntimeError(f"the demo did not answer within 5 minutes:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def watch(self) -> None:
        """Counts each time the demo stops on its own, then starts it again."""
        while not self.stopping:
            time.sleep(2)
            if self.process is not None and self.process.poll() is not None and not self.stopping:
                crash = {"at": now(), "status": self.process.returncode, "tail": self.tail()}
                with self.tally.lock:
                    self.tally.crashes.append(crash)
                print(f"{now()} CRASH: the demo stopped ({crash['status']}):\n{crash['tail']}")
                self.start()

    def stop(self) -> None:
        self.stopping = True
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)


class ApiClient:
    """tom through the API: the trading, jobs and money a script of a team does."""

    def __init__(self, demo: Demo, tally: Tally) -> None:
        self.demo, self.tally = demo, tally
        self.http = httpx.Client(base_url=demo.base, timeout=30)
        self.token = ""
        self.organization = ""
        self.bids: list[str] = []
        self.jobs: list[str] = []

    def call(self, method: str, path: str, kind: str, **kwargs: Any) -> httpx.Response | None:
        headers = {"Authorization": f"Token {self.token}"} if self.token else {}
        if method == "POST":
            headers["Idempotency-Key"] = str(uuid.uuid4())
        try:
            answer = self.http.request(method, path, headers=headers, **kwargs)
        except httpx.HTTPError as error:
            self.tally.answer(kind, type(error).__name__, str(error))
            return None
        self.tally.answer(kind, answer.status_code, answer.text)
        return answer

    def log_in(self) -> None:
        answer = self.call(
            "POST", f"{API}/auth/token/", "POST /auth/token/", json=credentials("tom")
        )
        if answer is None or answer.status_code != 200:
            raise RuntimeError("tom could not log in through the API")
        self.token = answer.json()["token"]
        me = self.call("GET", f"{API}/me/", "GET /me/")
        assert me is not None
        self.organization = next(
            o["id"] for o in me.json()["organizations"] if o["name"] == "Nimbus Research"
        )

    def open_offers(self) -> list[dict[str, Any]]:
        answer = self.call("GET", f"{API}/offers/?status=open", "GET /offers/")
        return answer.json()["results"] if answer is not None and answer.is_success else []

    def step(self) -> None:
        action = rng.choices(
            [self.browse, self.bid, self.withdraw, self.buy, self.submit, self.follow, self.top_up],
            weights=[5, 2, 1, 1, 2, 4, 1],
        )[0]
        action()

    def browse(self) -> None:
        offers = self.open_offers()
        if offers:
            offer = rng.choice(offers)
            self.call("GET", f"{API}/offers/{offer['id']}/", "GET /offers/{id}/")
        self.call("GET", f"{API}/allocations/", "GET /allocations/")
        self.call("GET", f"{API}/organizations/{self.organization}/", "GET /organizations/{id}/")

    def bid(self) -> None:
        offers = [o for o in self.open_offers() if o.get("auction_closes_at")]
        if not offers:
            return
        offer = rng.choice(offers)
        body = {"organization": self.organization, "quantity": 2, "price": offer["reserve_price"]}
        answer = self.call(
            "POST", f"{API}/offers/{offer['id']}/bids/", "POST /offers/{id}/bids/", json=body
        )
        if answer is not None and answer.status_code == 201:
            self.bids.append(answer.json()["id"])

    def withdraw(self) -> None:
        if self.bids:
            bid = self.bids.pop(rng.randrange(len(self.bids)))
            self.call("DELETE", f"{API}/bids/{bid}/", "DELETE /bids/{id}/")

    def buy(self) -> None:
        offers = [o for o in self.open_offers() if o.get("buy_now_price")]
        if offers:
            offer = rng.choice(offers)
            body = {"organization": self.organization, "quantity": 1}
            self.call(
                "POST", f"{API}/offers/{offer['id']}/buy/", "POST /offers/{id}/buy/", json=body
            )

    def submit(self) -> None:
        answer = self.call("GET", f"{API}/allocations/", "GET /allocations/")
        if answer is None or not answer.is_success:
            return
        active = [a for a in answer.json()["results"] if a["status"] == "active"]
        if not active:
            return
        body = {
            "allocation": active[0]["id"],
            "name": f"soak-{uuid.uuid4().hex[:6]}",
            "script": "#!/bin/bash\necho soak on $(hostname)\nsleep 2\necho done >&2\n",
            "time_limit_minutes": 1,
        }
        if rng.random() < 0.3:
            body["array"] = "0-2"
        answer = self.call("POST", f"{API}/jobs/", "POST /jobs/", json=body)
        if answer is not None and answer.status_code == 201:
            self.jobs.append(answer.json()["id"])

    def follow(self) -> None:
        for job in list(self.jobs):
            answer = self.call("GET", f"{API}/jobs/{job}/", "GET /jobs/{id}/")
            if answer is None or not answer.is_success:
                continue
            state = answer.json()["state"]
            stream = rng.choice(["stdout", "stderr"])
            # An array's output is its tasks': the first one's.
            task = "&task=0" if answer.json().get("array") else ""
            self.call(
                "GET", f"{API}/jobs/{job}/output/?stream={stream}{task}", "GET /jobs/{id}/output/"
            )
            if state in ENDED:
                self.jobs.remove(job)
                with self.tally.lock:
                    self.tally.jobs_ended[state] += 1

    def top_up(self) -> None:
        path = f"{API}/organizations/{self.organization}/top-ups/"
        answer = self.call(
            "POST", path, "POST /organizations/{id}/top-ups/", json={"amount": "5.00"}
        )
        if answer is None or answer.status_code != 201:
            return
        payment_intent = answer.json()["client_secret"].split("_secret_")[0]
        try:
            status = pay(self.demo.stripe_port, payment_intent)
        except Exception as error:  # counted; the soak goes on
            self.tally.error(f"paying a top-up on the local Stripe server: {error!r}")
            return
        with self.tally.lock:
            self.tally.top_ups[status] += 1
        self.call("GET", f"{API}/organizations/{self.organization}/ledger/", "GET /ledger/")


def credentials(username: str) -> dict[str, str]:
    return {"username": username, "password": PASSWORD}


def pay(stripe_port: int, payment_intent: str) -> str:
    """What Stripe.js does on the money page: a card on the PaymentIntent, then a confirm."""
    from computeshare.settings.insecure import DEMO_STRIPE_SECRET_KEY

    client = stripe.StripeClient(
        DEMO_STRIPE_SECRET_KEY,
        base_addresses={"api": f"http://127.0.0.1:{stripe_port}"},
        max_network_retries=0,
    )
    card = {"number": "4242424242424242", "exp_month": 12, "exp_year": 2030, "cvc": "123"}
    method = client.v1.payment_methods.create(params={"type": "card", "card": card})
    client.v1.payment_intents.update(payment_intent, params={"payment_method": method.id})
    return str(client.v1.payment_intents.confirm(payment_intent).status)


def browser_loop(demo: Demo, tally: Tally, until: float, organization: str) -> None:
    """A person in Chromium: logs in (mia or tom in turn) and walks the pages."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    pages = ["/dashboard/", "/offers/", "/jobs/", "/notifications/", "/market/price-history/"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium")
        round_number = 0
        while time.monotonic() < until:
            round_number += 1
            username = "mia" if round_number % 2 else "tom"
            context = browser.new_context(viewport={"width": 390, "height": 844})
            page = context.new_page()
            page.on(
                "pageerror",
                lambda error, page=page: tally.error(f"browser page error on {page.url}: {error}"),
            )

            def visit(path: str, kind: str, page: Any = page) -> None:
                try:
                    answer = page.goto(f"{demo.base}{path}", timeout=30_000)
                    tally.answer(kind, answer.status if answer else "no answer")
                except PlaywrightError as error:
                    tally.answer(kind, "BrowserError", str(error))

            try:
                visit("/login/", "page /login/")
                page.get_by_label("Username").fill(username)
                page.get_by_label("Password").fill(PASSWORD)
                page.get_by_role("button", name="Log in").click()
                page.wait_for_load_state()
                for _ in range(8):
                    if time.monotonic() >= until:
                        break
                    path = rng.choice(pages)
                    visit(path, f"page {path}")
                    links = page.locator("a[href^='/offers/'], a[href^='/jobs/']").all()
                    if links:
                        href = rng.choice(links).get_attribute("href") or "/"
                        if href.count("/") >= 3:
                            visit(href, "page /offers|jobs/{id}/")
                    if username == "tom":
                        money = f"/organizations/{organization}/money/"
                        visit(money, "page /organizations/{id}/money/")
                    time.sleep(rng.uniform(1, 3))
            except PlaywrightError as error:
                tally.error(f"browser: {error}")
            finally:
                context.close()
        browser.close()


def api_loop(client: ApiClient, tally: Tally, until: float) -> None:
    while time.monotonic() < until:
        try:
            if not client.token:
                client.log_in()
            client.step()
        except Exception as error:  # counted; the soak goes on
            tally.error(f"API client: {error!r}")
            client.token = ""
            time.sleep(2)
        time.sleep(rng.uniform(0.2, 1.0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--port", type=int, default=int(os.environ.get("DEMO_PORT", "8000")))
    parser.add_argument(
        "--stripe-port", type=int, default=int(os.environ.get("LOCALSTRIPE_PORT", "8420"))
    )
    arguments = parser.parse_args()
    sys.path.insert(0, str(ROOT))

    tally = Tally()
    demo = Demo(arguments.port, arguments.stripe_port, tally)
    started = time.monotonic()
    print(f"{now()} starting the demo on {demo.base} (its output: {demo.log_path})")
    demo.start()
    until = time.monotonic() + arguments.minutes * 60
    print(f"{now()} the demo answers; soaking for {arguments.minutes:g} minutes")
    client = ApiClient(demo, tally)
    client.log_in()
    threads = [
        threading.Thread(target=demo.watch, daemon=True),
        threading.Thread(target=api_loop, args=(client, tally, until)),
        threading.Thread(target=browser_loop, args=(demo, tally, until, client.organization)),
    ]
    for thread in threads:
        thread.start()
    try:
        while time.monotonic() < until:
            time.sleep(60)
            with tally.lock:
                print(
                    f"{now()} requests {sum(tally.requests.values())}, errors "
                    f"{len(tally.errors)}, crashes {len(tally.crashes)}",
                    flush=True,
                )
        for thread in threads[1:]:
            thread.join()
    finally:
        demo.stop()

    report = {
        "minutes": round((time.monotonic() - started) / 60, 1),
        "requests": sum(tally.requests.values()),
        "requests_by_kind": dict(tally.requests.most_common()),
        "answers_by_status": dict(sorted(tally.statuses.items())),
        "refusals": dict(tally.refusals.most_common()),
        "errors": len(tally.errors),
        "error_samples": tally.errors[:30],
        "crashes": tally.crashes,
        "jobs_ended": dict(tally.jobs_ended),
        "top_ups": dict(tally.top_ups),
    }
    path = ROOT / "var" / "soak" / "report.json"
    path.write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "error_samples"}, indent=2))
    for line in tally.errors[:30]:
        print("error:", line)
    print(f"report: {path}")
    return 1 if tally.crashes or tally.errors else 0


if __name__ == "__main__":
    sys.exit(main())
