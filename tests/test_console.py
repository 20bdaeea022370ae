"""The web console in a real headless browser: Debian's chromium driven by Playwright.

Checks what a user sees: the topics page lists a topic a client created, the message browser shows a
record just produced (and a new one without a reload), the groups page shows a group's lag and a
consumer-protocol group's epochs and assignments against their targets, topics
can be created and deleted from the page, the transactions page shows open and hanging transactions and
the topic page its producers. Screenshots go to test-artifacts/ (gitignored).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import confluent_admin, confluent_produce, create_topics, wait_until
from playwright.sync_api import Browser, Page, expect, sync_playwright
from test_metrics import admin_url

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
UI_TIMEOUT_MS = 15_000
# Playwright's expect() has a clock of its own (5 s unless told): the same as the page's.
expect.set_options(timeout=UI_TIMEOUT_MS)

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def console_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("console") / "data",
                      overrides={"admin.listeners": "http://127.0.0.1:0"}).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, timeout=60_000)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    p = context.new_page()
    p.set_default_timeout(UI_TIMEOUT_MS)
    errors: list[str] = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    try:
        yield p
    finally:
        context.close()
    assert errors == [], f"JavaScript errors in the console: {errors}"


def shot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"console-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
    return path


def test_topics_page_lists_a_topic_created_by_a_client(console_broker: BrokerProcess, page: Page) -> None:
    create_topics(console_broker.bootstrap, {"console-orders": 3})
    confluent_produce(console_broker.bootstrap, "console-orders",
                      [{"value": f"order {i}".encode(), "partition": i % 3} for i in range(6)])
    page.goto(admin_url(console_broker) + "/#/topics")
    row = page.locator('tr[data-topic="console-orders"]')
    expect(row).to_be_visible()
    expect(row.locator("td").nth(1)).to_have_text("3")  # partitions
    expect(row.locator("td").nth(3)).to_have_text("6")  # messages
    expect(page.locator("#status-text")).to_have_text("broker 0 ready")
    shot(page, "topics")

    # The topic's own page: partitions with their offsets.
    row.locator("a", has_text="console-orders").click()
    expect(page.locator("#t-parts tbody tr")).to_have_count(3)
    expect(page.locator("#t-parts tbody tr").first.locator("td").nth(5)).to_have_text("2")  # high watermark


def test_message_browser_shows_a_record_just_produced(console_broker: BrokerProcess, page: Page) -> None:
    create_topics(console_broker.bootstrap, {"console-events": 2})
    value = json.dumps({"id": 42, "item": "coffee", "qty": 2}, separators=(",", ":")).encode()
    confluent_produce(console_broker.bootstrap, "console-events",
                      [{"key": b"order-42", "value": value, "partition": 1, "headers": [("source", b"pos-7")]}])
    page.goto(admin_url(console_broker) + "/#/messages/console-events/1")
    table = page.locator("#m-table")
    first = table.locator("tbody tr").first
    expect(first).to_contain_text("order-42")
    expect(first).to_contain_text('"item":"coffee"')
    expect(first).to_contain_text("source=pos-7")
    expect(first.locator("td").first).to_have_text("0")

    page.locator("#m-format button", has_text="JSON").click()
    expect(first.locator("td").nth(3)).to_contain_text('"item": "coffee"')
    page.locator("#m-format button", has_text="Hex").click()
    expect(first.locator("td").nth(3)).to_contain_text("7b 22 69 64")  # {"id
    page.locator("#m-format button", has_text="Text").click()

    # Live: a record produced while the page is open appears without a reload (newest first).
    confluent_produce(console_broker.bootstrap, "console-events",
                      [{"key": b"order-43", "value": b"tea, live", "partition": 1}])
    expect(table.locator("tbody tr").first).to_contain_text("tea, live")
    expect(table.locator("tbody tr")).to_have_count(2)
    shot(page, "messages")

    # From an offset.
    page.locator("#m-mode button", has_text="From offset").click()
    page.locator("#m-offset").fill("1")
    page.get_by_role("button", name="Load").click()
    expect(table.locator("tbody tr")).to_have_count(1)
    expect(table.locator("tbody tr").first).to_contain_text("order-43")


def test_groups_page_shows_lag(console_broker: BrokerProcess, page: Page) -> None:
    from confluent_kafka import Consumer, TopicPartition

    create_topics(console_broker.bootstrap, {"console-lag": 1})
    confluent_produce(console_broker.bootstrap, "console-lag",
                      [{"value": f"job {i}".encode(), "partition": 0} for i in range(7)])
    consumer = Consumer({"bootstrap.servers": console_broker.bootstrap, "group.id": "console-workers",
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("console-lag", 0, 2)], asynchronous=False)
    finally:
        consumer.close()
    page.goto(admin_url(console_broker) + "/#/groups")
    row = page.locator('tr[data-group="console-workers"]')
    expect(row).to_be_visible()
    expect(row.locator("td").nth(4)).to_have_text("5")  # lag: 7 - 2
    expect(row).to_contain_text("console-lag")
    shot(page, "groups")

    row.locator("a").click()
    offsets = page.locator('#gd-offsets tr[data-tp="console-lag-0"]')
    expect(offsets.locator("td").nth(2)).to_have_text("2")  # committed
    expect(offsets.locator("td").nth(3)).to_have_text("7")  # end offset
    expect(offsets.locator("td").nth(4)).to_have_text("5")  # lag


def test_group_page_shows_members_and_assignment(console_broker: BrokerProcess, page: Page) -> None:
    from confluent_kafka import Consumer

    create_topics(console_broker.bootstrap, {"console-live": 2})
    confluent_produce(console_broker.bootstrap, "console-live",
                      [{"value": f"m{i}".encode(), "partition": i % 2} for i in range(4)])
    consumer = Consumer({"bootstrap.servers": console_broker.bootstrap, "group.id": "console-live-readers",
                         "client.id": "reader-1", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["console-live"])
        got: list[Any] = []

        def assigned_and_read() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg)
            return len(consumer.assignment()) == 2 and len(got) >= 1

        wait_until(assigned_and_read, 30, interval=0, what="a stable group with both partitions assigned")
        consumer.commit(message=got[0], asynchronous=False)
        page.goto(admin_url(console_broker) + "/#/groups/console-live-readers")
        expect(page.locator("#gd-cards")).to_contain_text("Stable")
        member = page.locator("#gd-members tbody tr").first
        expect(member).to_contain_text("reader-1")
        expect(member).to_contain_text("console-live [0, 1]")
        committed = page.locator(f'#gd-offsets tr[data-tp="console-live-{got[0].partition()}"]')
        expect(committed.locator("td").nth(4)).to_have_text("1")  # 2 records, committed offset 1
        expect(committed.locator("td").nth(5)).not_to_have_text("–")  # the owning member
        shot(page, "group")
    finally:
        consumer.close()


def test_consumer_protocol_group_page(console_broker: BrokerProcess, page: Page) -> None:
    """A KIP-848 group: the groups page shows its type and epoch; its page the epochs and, per member,
    the member epoch and the assignment against the target (to revoke struck through, to assign +N).
    A member driven by hand owns both partitions and has not heard of the confluent-kafka member
    (group.protocol=consumer) that joined since."""
    import uuid

    from confluent_kafka import Consumer
    from helpers import RawConnection
    from test_groups_cli import join_by_hand

    create_topics(console_broker.bootstrap, {"console-kip848": 2})
    with RawConnection(console_broker.bootstrap, client_id="by-hand") as conn:
        e1 = join_by_hand(conn, "console-kip848-readers", str(uuid.uuid4()), "console-kip848", 2)
        joiner = Consumer({"bootstrap.servers": console_broker.bootstrap, "group.id": "console-kip848-readers",
                           "client.id": "joiner", "group.protocol": "consumer"})
        try:
            joiner.subscribe(["console-kip848"])
            page.goto(admin_url(console_broker) + "/#/groups")
            row = page.locator('tr[data-group="console-kip848-readers"]')

            def joined() -> bool:
                joiner.poll(0.1)
                return row.locator("td").nth(2).text_content() == "2"

            wait_until(joined, 30, interval=0, what="the joiner in the groups page")
            expect(row.locator("td").nth(5)).to_have_text("consumer")
            expect(row.locator("td").nth(6)).to_have_text(str(e1 + 1))  # the group epoch

            row.locator("a").click()
            expect(page.locator("#gd-type")).to_contain_text("consumer")
            expect(page.locator("#gd-state")).to_contain_text("Reconciling")
            expect(page.locator("#gd-assignor")).to_contain_text("uniform")
            expect(page.locator("#gd-epoch")).to_contain_text(f"{e1 + 1}target assignment epoch {e1 + 1}")
            hand = page.locator('#gd-members tr[data-client="by-hand"]')
            new = page.locator('#gd-members tr[data-client="joiner"]')
            expect(hand.locator("td").nth(4)).to_have_text(str(e1))
            expect(new.locator("td").nth(4)).to_have_text(str(e1 + 1))
            expect(hand.locator("td").nth(5)).to_have_text("console-kip848")
            # One partition moves: the hand-driven member still holds it, the joiner waits for it.
            expect(hand.locator(".part.revoke")).to_have_count(1)
            moving = hand.locator(".part.revoke").text_content()
            expect(new.locator(".part.assign")).to_have_text(f"+{moving}")
            expect(hand.locator("td").nth(6)).to_have_text("console-kip848 [0, 1]")
            shot(page, "consumer-group")
        finally:
            joiner.close()


def test_create_and_delete_a_topic_from_the_console(console_broker: BrokerProcess, page: Page) -> None:
    page.goto(admin_url(console_broker) + "/#/topics")
    form = page.locator("#create-topic")
    form.locator('input[name="name"]').fill("made-in-console")
    form.locator('input[name="partitions"]').fill("4")
    form.locator('textarea[name="configs"]').fill("retention.ms=3600000")
    form.get_by_role("button", name="Create topic").click()
    expect(page.locator(".msg.ok")).to_contain_text("Created topic made-in-console")
    row = page.locator('tr[data-topic="made-in-console"]')
    expect(row.locator("td").nth(1)).to_have_text("4")
    admin = confluent_admin(console_broker.bootstrap)
    assert len(admin.list_topics(timeout=10).topics["made-in-console"].partitions) == 4

    # A bad name is refused with the broker's reason.
    form.locator('input[name="name"]').fill("made-in-console")
    form.get_by_role("button", name="Create topic").click()
    expect(page.locator(".msg.error")).to_contain_text("already exists")

    page.once("dialog", lambda d: d.accept())
    row.locator('button[data-delete="made-in-console"]').click()
    expect(page.locator(".msg.ok")).to_contain_text("Deleted topic made-in-console")
    expect(row).to_have_count(0)
    wait_until(lambda: "made-in-console" not in admin.list_topics(timeout=10).topics, 10, what="topic deleted")


def test_overview_shows_broker_and_throughput(console_broker: BrokerProcess, page: Page) -> None:
    create_topics(console_broker.bootstrap, {"console-busy": 1})
    page.goto(admin_url(console_broker) + "/#/overview")
    cards = page.locator("#ov-cards")
    expect(cards).to_contain_text("Ready")
    # Produce while the page polls: the "in now" rate becomes non-zero without a reload.
    records: list[dict[str, Any]] = [{"value": b"x" * 200, "partition": 0} for _ in range(300)]

    def rate_shows() -> bool:
        confluent_produce(console_broker.bootstrap, "console-busy", records)
        text = page.locator("#ov-rin").inner_text()  # e.g. "605 rec/s"
        return text.endswith(" rec/s") and float(text.split()[0].replace(",", "")) >= 50

    wait_until(rate_shows, 30, interval=0.5, what="the records-in rate of this test's producer on the overview")
    busy = page.locator("#ov-topics tr", has_text="console-busy")
    expect(busy.locator("td").nth(2)).not_to_have_text("0")  # messages
    expect(page.locator("#ov-recs svg path.in")).to_have_count(1)  # the chart has drawn the history
    shot(page, "overview")


def test_transactions_page_shows_open_hanging_and_producers(console_broker: BrokerProcess, page: Page) -> None:
    from txn_helpers import forge_hanging_transaction, txn_producer

    bs = console_broker.bootstrap
    create_topics(bs, {"console-txn": 2})
    ghost = forge_hanging_transaction(bs, "console-txn", 0, producer_id=765_432)
    live = txn_producer(bs, "console-writer", **{"transaction.timeout.ms": 60_000})
    live.begin_transaction()
    live.produce("console-txn", value=b"undecided", partition=1)
    assert live.flush(10) == 0
    page.goto(admin_url(console_broker) + "/#/transactions")
    open_row = page.locator('#tx-open tr[data-txn="console-writer"]')
    expect(open_row).to_contain_text("Ongoing")
    expect(open_row.locator("td").nth(4)).to_have_text("console-txn-1")  # partitions
    expect(open_row.locator("td").nth(7)).to_have_text("1m 0s")  # timeout
    hanging = page.locator('#tx-hanging tr[data-hanging="console-txn-0-765432"]')
    expect(hanging.locator("td").nth(4)).to_have_text(str(ghost))  # start offset
    expect(hanging).to_contain_text("no ongoing transaction of this producer at the coordinator")
    expect(page.locator("#tx-hanging-count .value")).to_have_text("1")
    shot(page, "transactions")

    open_row.locator("a").click()
    expect(page.locator("#txd-state")).to_contain_text("Ongoing")
    expect(page.locator('#txd-parts tr[data-tp="console-txn-1"]')).to_be_visible()

    # The topic page lists each partition's producers and where an open transaction starts.
    page.goto(admin_url(console_broker) + "/#/topics/console-txn")
    expect(page.locator('#t-producers tr[data-producer="0-765432"]')).to_contain_text(f"open from {ghost}")
    expect(page.locator("#t-producers tbody tr")).to_have_count(2)

    # Committed while the page is open: it leaves the open transactions without a reload.
    page.goto(admin_url(console_broker) + "/#/transactions")
    expect(open_row).to_be_visible()
    live.commit_transaction(20)
    expect(open_row).to_have_count(0, timeout=10_000)
    expect(page.locator('#tx-idle tr[data-txn="console-writer"]')).to_contain_text("CompleteCommit")
