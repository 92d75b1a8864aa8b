"""The load test's simulated people (Locust), started by bench/loadtest/run.py, which passes the
scene it made (LOADTEST_SCENE, a JSON file): who signs in with which password or token, which
offers exist and which allocations run jobs.

- Browser: signs in on the log-in page, then reads the offers pages and the offers API.
- Trader: with an API token, lists offers, bids (and withdraws some bids), buys at the buy-now
  price, and reads the team's bids and allocations.
- Runner: with an API token, submits a tiny job (`true`, 1 CPU, a minute's limit) to the real
  Slurm test cluster and follows it until it ends.

Every request is named by its kind (the path with its ids as {id}), which the table shows."""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import uuid
from typing import Any

from locust import HttpUser, between, task

SCENE: dict[str, Any] = json.loads(open(os.environ["LOADTEST_SCENE"]).read())  # noqa: SIM115
API = "/api/v1"
FILTERS = [
    "",
    "?resource=cpu&status=open",
    "?resource=gpu&ordering=reserve_price",
    "?max_price=2.50&ordering=-reserve_price",
    "?status=open&ordering=auction_closes_at&page=2",
    "?min_quantity=10&page_size=20",
]
# Which offer, filter and pause: a simulation's choices, not secrets.
rng = random.Random()  # noqa: S311
_numbers: dict[str, itertools.count[int]] = {}
ENDED = {"completed", "failed", "cancelled", "timeout", "node_fail", "out_of_memory", "preempted"}


def _next_person(kind: str) -> dict[str, Any]:
    """Each simulated person of a kind takes the next of the scene's, round robin."""
    people = SCENE[kind]
    return people[next(_numbers.setdefault(kind, itertools.count())) % len(people)]  # type: ignore[no-any-return]


class _ApiUser(HttpUser):
    abstract = True
    kind = ""

    def on_start(self) -> None:
        self.person = _next_person(self.kind)
        self.client.headers["Authorization"] = f"Token {self.person['token']}"

    def post_json(self, path: str, body: dict[str, Any], name: str) -> Any:
        return self.client.post(
            path, json=body, name=name, headers={"Idempotency-Key": str(uuid.uuid4())}
        )

    def offers_page(self) -> None:
        self.client.get(f"{API}/offers/{rng.choice(FILTERS)}", name="API GET /offers/")


class Browser(HttpUser):
    """Reads the market as a person in a browser does, and now and then through the API."""

    weight = 5
    wait_time = between(1, 4)

    def on_start(self) -> None:
        self.person = _next_person("browsers")
        page = self.client.get("/login/", name="page GET /login/")
        found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        answer = self.client.post(
            "/login/",
            data={
                "username": self.person["username"],
                "password": self.person["password"],
                "csrfmiddlewaretoken": found.group(1) if found else "",
            },
            name="page POST /login/",
            allow_redirects=False,
        )
        if answer.status_code != 302:
            raise RuntimeError(f"log-in refused ({answer.status_code})")

    @task(4)
    def offers_page(self) -> None:
        self.client.get(f"/offers/{rng.choice(FILTERS)}", name="page GET /offers/")

    @task(3)
    def offer_page(self) -> None:
        offer = rng.choice(SCENE["offers"])
        self.client.get(f"/offers/{offer}/", name="page GET /offers/{id}/")

    @task(2)
    def offers_api(self) -> None:
        self.client.get(f"{API}/offers/{rng.choice(FILTERS)}", name="API GET /offers/")

    @task(1)
    def offer_api(self) -> None:
        offer = rng.choice(SCENE["offers"])
        self.client.get(f"{API}/offers/{offer}/", name="API GET /offers/{id}/")


class Trader(_ApiUser):
    """Bids and buys through the API for a team of several traders."""

    weight = 3
    kind = "traders"
    wait_time = between(1, 4)

    def on_start(self) -> None:
        super().on_start()
        self.bids: list[str] = []

    @task(3)
    def browse(self) -> None:
        self.offers_page()

    @task(2)
    def look_at_offer(self) -> None:
        offer = rng.choice(SCENE["offers"])
        self.client.get(f"{API}/offers/{offer}/", name="API GET /offers/{id}/")

    @task(2)
    def bid(self) -> None:
        offer = rng.choice(SCENE["offers"])
        body = {"organization": self.person["organization"], "quantity": 5, "price": "6.00"}
        with self.client.post(
            f"{API}/offers/{offer}/bids/",
            json=body,
            name="API POST /offers/{id}/bids/",
            headers={"Idempotency-Key": str(uuid.uuid4())},
            catch_response=True,
        ) as answer:
            if answer.status_code == 201:
                self.bids.append(answer.json()["id"])
                answer.success()
            else:
                answer.failure(f"{answer.status_code} {answer.text[:200]}")

    @task(1)
    def withdraw(self) -> None:
        if self.bids:
            bid = self.bids.pop(rng.randrange(len(self.bids)))
            self.client.delete(f"{API}/bids/{bid}/", name="API DELETE /bids/{id}/")

    @task(1)
    def buy(self) -> None:
        offer = rng.choice(SCENE["buy_now_offers"])
        body = {"organization": self.person["organization"], "quantity": 1}
        self.post_json(f"{API}/offers/{offer}/buy/", body, "API POST /offers/{id}/buy/")

    @task(1)
    def my_bids(self) -> None:
        self.client.get(f"{API}/bids/?status=open", name="API GET /bids/")

    @task(1)
    def my_allocations(self) -> None:
        self.client.get(f"{API}/allocations/", name="API GET /allocations/")


class Runner(_ApiUser):
    """Submits a tiny job and follows it to its end, then waits before the next."""

    weight = 1
    kind = "runners"
    wait_time = between(2, 4)

    @task
    def run_a_job(self) -> None:
        body = {
            "allocation": self.person["allocation"],
            "name": "load",
            "script": "#!/bin/bash\ntrue\n",
            "time_limit_minutes": 1,
            "cpus_per_task": 1,
        }
        with self.client.post(
            f"{API}/jobs/",
            json=body,
            name="API POST /jobs/",
            headers={"Idempotency-Key": str(uuid.uuid4())},
            catch_response=True,
        ) as answer:
            if answer.status_code != 201:
                answer.failure(f"{answer.status_code} {answer.text[:200]}")
                return
            job = answer.json()["id"]
        # Followed as a client would: every 3 s, for at most 2 minutes.
        for _ in range(40):
            self.wait_seconds(3)
            state = self.client.get(f"{API}/jobs/{job}/", name="API GET /jobs/{id}/").json()
            if state.get("state") in ENDED:
                break
        self.client.get(
            f"{API}/jobs/?allocation={self.person['allocation']}", name="API GET /jobs/"
        )

    def wait_seconds(self, seconds: float) -> None:
        import gevent

        gevent.sleep(seconds)
