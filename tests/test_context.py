"""``find_partition``: one partition's directory by name, as listing the log dirs would find it;
where the process serves no broker, the selection is what the metadata store holds instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.support import base_doc
from tiering_core.config import parse_config
from tiering_core.context import TieringContext, find_partition, select_partitions
from tiering_core.errors import ConfigError, NoRemoteDataError, TieringError
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition


def two_log_dirs(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    for log_dir, names in ((a, ["orders-0", "orders-1", "__cluster_metadata-0"]), (b, ["orders-2", "clicks-0"])):
        for name in names:
            (log_dir / name).mkdir(parents=True)
    (a / "orders-7.future").mkdir()  # not a partition directory of ours
    outside = tmp_path / "elsewhere" / "clicks-1"
    outside.mkdir(parents=True)
    (b / "clicks-1").symlink_to(outside)  # the broker never makes one: not a partition
    return a, b


def test_found_by_name_as_the_listing_finds_it(tmp_path: Path) -> None:
    a, b = two_log_dirs(tmp_path)
    config = parse_config({**base_doc(tmp_path), "log_dirs": [str(a), str(b)]})
    listed = select_partitions(config)
    assert [str(log.topic_partition) for log in listed] == ["clicks-0", "orders-0", "orders-1", "orders-2"]
    for log in listed:
        found = find_partition(config, log.topic_partition)
        assert (found.path, found.log_dir, found.topic_partition) == (log.path, log.log_dir, log.topic_partition)
    for absent in ("orders-3", "clicks-1", "__cluster_metadata-0", "orders-7"):
        tp = TopicPartition.from_dir_name(absent)
        with pytest.raises(TieringError, match=f"^partition {absent} is not in the log dirs$"):
            find_partition(config, tp)
        with pytest.raises(TieringError, match=r"not in the log dirs|has no partition in the log dirs"):
            select_partitions(config, tp.topic, tp.partition)


def test_a_missing_log_dir_or_an_unchosen_broker_is_an_error(tmp_path: Path) -> None:
    config = parse_config({**base_doc(tmp_path), "log_dirs": [str(tmp_path / "gone")]})
    with pytest.raises(TieringError, match=f"log dir {tmp_path / 'gone'} does not exist or is not a directory"):
        find_partition(config, TopicPartition("orders", 0))
    doc = base_doc(tmp_path)
    del doc["log_dirs"]
    doc["brokers"] = {1: {"log_dirs": [str(tmp_path / "b1")]}, 2: {"log_dirs": [str(tmp_path / "b2")]}}
    with pytest.raises(ConfigError, match=r"brokers: 2 brokers are configured"):
        find_partition(parse_config(doc), TopicPartition("orders", 0))


def test_serving_no_broker_the_selection_is_every_topic_id_the_store_holds_live(tmp_path: Path) -> None:
    """No log dir is read (the brokers' disks are not even there): the store's live partitions of
    the selection, each topic id of a topic made again; a name it holds nothing of is named."""
    doc = base_doc(tmp_path)
    del doc["log_dirs"]
    doc["brokers"] = {1: {"log_dirs": [str(tmp_path / "b1")]}, 2: {"log_dirs": [str(tmp_path / "b2")]}}
    doc["remote"] = {"backend": "filesystem", "root": str(tmp_path / "tier")}
    first, again, clicks = "A" * 21 + "Q", "B" * 21 + "Q", "C" * 21 + "Q"
    held = [
        TopicIdPartition(first, TopicPartition("orders", 0)),
        TopicIdPartition(again, TopicPartition("orders", 0)),
        TopicIdPartition(again, TopicPartition("orders", 1)),
        TopicIdPartition(clicks, TopicPartition("clicks", 0)),
    ]
    with TieringContext.open(parse_config(doc)) as ctx:
        assert ctx.config.serves_no_broker
        for tip in held:
            ctx.metadata.register_partition(tip)
        assert ctx.selected_partitions() == sorted(held, key=lambda t: (t.topic, t.partition, t.topic_id))
        assert ctx.selected_partitions("orders") == held[:3]
        assert ctx.selected_partitions("orders", 1) == [held[2]]
        for topic, partition, named in (("orders", 7, "orders-7"), ("payments", None, "payments")):
            with pytest.raises(NoRemoteDataError, match=f"^partition {named} has no remote data"):
                ctx.selected_partitions(topic, partition)
        assert ctx.selected_partition("orders", 1) == held[2]
        with pytest.raises(TieringError, match=r"^orders-0: the metadata store holds remote data of 2 topic ids"):
            ctx.selected_partition("orders", 0)  # only the broker holding it knows which is current
        with pytest.raises(TieringError, match=r"^--partition needs --topic$"):
            ctx.tiered_partitions(None, 1)
