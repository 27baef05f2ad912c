"""The cluster form of the config (``brokers:``): one entry per broker, disjoint log dirs, and a
process that reads only its own broker's disks; the single-broker form is one implicit broker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.config.support import base_doc
from tiering_core.config import (
    BROKER_ID_ENV,
    BrokerConfig,
    PlatformConfig,
    implied_broker_id,
    parse_config,
    select_broker,
)
from tiering_core.context import select_partitions
from tiering_core.errors import ConfigError, TieringError
from tiering_core.kafka.log_writer import write_meta_properties


def cluster_doc(tmp_path: Path, brokers: dict[Any, Any] | None = None) -> dict[str, Any]:
    doc = base_doc(tmp_path)
    del doc["log_dirs"]
    doc["brokers"] = brokers or {
        1: {"log_dirs": [str(tmp_path / "b1" / "a"), str(tmp_path / "b1" / "b")]},
        2: {"log_dirs": [str(tmp_path / "b2")], "queue": "kafka-host-2"},
        3: {"log_dirs": str(tmp_path / "b3")},  # Kafka's comma-separated form
    }
    return doc


def test_brokers_map_ids_to_log_dirs_and_queues(tmp_path: Path) -> None:
    config = parse_config(cluster_doc(tmp_path))
    assert sorted(config.brokers) == [1, 2, 3]
    assert config.brokers[1] == BrokerConfig(1, (tmp_path / "b1" / "a", tmp_path / "b1" / "b"), "tiering-broker-1")
    assert config.brokers[2].queue == "kafka-host-2" and config.brokers[3].log_dirs == (tmp_path / "b3",)
    assert [b.broker_id for b in config.broker_configs()] == [1, 2, 3]
    assert len(config.all_log_dirs()) == 4
    assert config.log_dirs == () and config.broker is None  # no broker chosen yet: no log dir is read


def test_the_single_broker_form_is_one_implicit_broker(tmp_path: Path) -> None:
    config = parse_config(base_doc(tmp_path))
    assert config.brokers == {} and config.broker == BrokerConfig(None, (tmp_path / "kafka",), None)
    assert config.broker_configs() == (config.broker,) and config.all_log_dirs() == (tmp_path / "kafka",)
    assert config.for_broker(None) is config
    named = config.for_broker(4)  # --broker on a single broker: its id, held to meta.properties
    assert named.log_dirs == config.log_dirs and named.broker == BrokerConfig(4, config.log_dirs, "tiering-broker-4")


def _set(doc: dict[str, Any], *path: Any, value: Any) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


BAD: list[tuple[str, Callable[[dict[str, Any], Path], None], str]] = [
    ("both forms", lambda d, t: d.update(log_dirs=[str(t / "x")]), "brokers: give either log_dirs"),
    ("neither form", lambda d, t: d.pop("brokers"), "log_dirs: required key is missing"),
    ("empty brokers", lambda d, t: d.update(brokers={}), "brokers: expected at least one broker"),
    ("not a mapping", lambda d, t: d.update(brokers=[1, 2]), "brokers: expected a mapping"),
    ("id not a number", lambda d, t: _set(d, "brokers", "b4", value={"log_dirs": ["/x4"]}), "brokers.'b4'"),
    ("negative id", lambda d, t: _set(d, "brokers", -4, value={"log_dirs": ["/x4"]}), "brokers.-4"),
    ("id twice", lambda d, t: _set(d, "brokers", "1", value={"log_dirs": ["/x4"]}), "brokers.1: the broker is given"),
    ("unknown key", lambda d, t: _set(d, "brokers", 2, "rack", value="r1"), "brokers.2.rack: unknown key"),
    ("no log dirs", lambda d, t: d["brokers"][2].pop("log_dirs"), "brokers.2.log_dirs: required key"),
    ("empty log dirs", lambda d, t: _set(d, "brokers", 2, "log_dirs", value=[]), "brokers.2.log_dirs: expected"),
    ("bad queue", lambda d, t: _set(d, "brokers", 2, "queue", value="a queue"), "brokers.2.queue"),
    ("empty queue", lambda d, t: _set(d, "brokers", 2, "queue", value=""), "brokers.2.queue"),
    (
        "shared queue",
        lambda d, t: _set(d, "brokers", 3, "queue", value="kafka-host-2"),
        "brokers.3.queue: kafka-host-2 is broker 2's queue too",
    ),
    (
        "shared log dir",
        lambda d, t: _set(d, "brokers", 3, "log_dirs", value=[str(t / "b2")]),
        "brokers.3.log_dirs: ",
    ),
    (
        "nested log dir",
        lambda d, t: _set(d, "brokers", 3, "log_dirs", value=[str(t / "b2" / "inner")]),
        "overlaps broker 2's log dir",
    ),
    (
        "enclosing log dir",
        lambda d, t: _set(d, "brokers", 3, "log_dirs", value=[str(t / "b1")]),
        "overlaps broker 1's log dir",
    ),
    (
        "one broker's dir twice",
        lambda d, t: _set(d, "brokers", 2, "log_dirs", value=[str(t / "b2"), str(t / "b2") + "/"]),
        "overlaps its own log dir",
    ),
    (
        "metadata log dir at the top",
        lambda d, t: d.update(metadata_log_dir=str(t / "meta")),
        "metadata_log_dir: in the cluster form each broker names its own",
    ),
    (
        "metadata log dir not a path",
        lambda d, t: _set(d, "brokers", 2, "metadata_log_dir", value=["/meta"]),
        "brokers.2.metadata_log_dir",
    ),
    (
        "metadata log dir in another broker's dir",
        lambda d, t: _set(d, "brokers", 2, "metadata_log_dir", value=str(t / "b3")),
        "brokers.2.metadata_log_dir: " + "{t}/b3 overlaps broker 3's log dir",
    ),
    (
        "index cache in a broker's dir",
        lambda d, t: d.update(index_cache_dir=str(t / "b3" / "cache")),
        "index_cache_dir: ",
    ),
]


@pytest.mark.parametrize(("name", "mutate", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_brokers_are_errors_naming_the_key(
    tmp_path: Path, name: str, mutate: Callable[[dict[str, Any], Path], None], message: str
) -> None:
    doc = cluster_doc(tmp_path)
    mutate(doc, tmp_path)
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    assert message.format(t=tmp_path) in str(err.value), name


def test_a_shared_log_dir_through_a_symlink_is_found(tmp_path: Path) -> None:
    (tmp_path / "b2").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "b2")
    doc = cluster_doc(tmp_path)
    doc["brokers"][3]["log_dirs"] = [str(tmp_path / "alias")]
    with pytest.raises(ConfigError, match=r"brokers.3.log_dirs: .* overlaps broker 2's log dir"):
        parse_config(doc)


def test_a_process_chooses_its_broker_by_flag_environment_or_the_only_one(tmp_path: Path) -> None:
    config = parse_config(cluster_doc(tmp_path))
    two = select_broker(config, 2, environ={})
    assert two.log_dirs == (tmp_path / "b2",) and two.broker is config.brokers[2] and two.brokers == config.brokers
    assert select_broker(config, environ={BROKER_ID_ENV: "3"}).log_dirs == (tmp_path / "b3",)
    assert select_broker(config, 1, environ={BROKER_ID_ENV: "3"}).broker is config.brokers[1]  # the flag wins
    unchosen = select_broker(config, environ={})  # reads no log dir: fine
    assert unchosen.log_dirs == () and unchosen.broker is None
    with pytest.raises(ConfigError, match=r"brokers: 3 brokers are configured \(1, 2, 3\).*--broker ID or TIERING"):
        select_broker(config, environ={}, required=True)
    with pytest.raises(ConfigError, match=r"brokers: 3 brokers are configured"):
        select_partitions(unchosen)  # whatever reads partitions without a broker fails the same way
    with pytest.raises(ConfigError, match=r"brokers.7: no such broker in the config \(configured: 1, 2, 3\)"):
        select_broker(config, 7, environ={})
    with pytest.raises(ConfigError, match="TIERING_BROKER_ID: expected a broker id"):
        select_broker(config, environ={BROKER_ID_ENV: "two"})
    single = parse_config(cluster_doc(tmp_path, {"5": {"log_dirs": [str(tmp_path / "b5")]}}))
    assert single.log_dirs == (tmp_path / "b5",) and single.broker is single.brokers[5]  # implied at once
    implied = select_broker(single, environ={}, required=True)
    assert implied.log_dirs == (tmp_path / "b5",) and implied.broker is not None and implied.broker.broker_id == 5


def with_meta(tmp_path: Path, config: PlatformConfig, node_ids: dict[Path, int]) -> None:
    for log_dir, node_id in node_ids.items():
        log_dir.mkdir(parents=True, exist_ok=True)
        write_meta_properties(log_dir, node_id)


def test_a_log_dir_of_another_broker_is_refused(tmp_path: Path) -> None:
    config = parse_config(cluster_doc(tmp_path))
    with_meta(tmp_path, config, {tmp_path / "b1" / "a": 1, tmp_path / "b1" / "b": 2, tmp_path / "b2": 2})
    assert select_broker(config, 2, environ={}).log_dirs == (tmp_path / "b2",)
    assert select_broker(config, 3, environ={}).broker is config.brokers[3]  # no meta.properties yet: judged later
    with pytest.raises(ConfigError) as err:
        select_broker(config, 1, environ={})
    assert f"brokers.1.log_dirs: {tmp_path / 'b1' / 'b'} belongs to broker 2" in str(err.value)
    assert "not to broker 1: refusing to read it" in str(err.value)
    (tmp_path / "b2" / "meta.properties").write_text("version=1\nnode.id=oops\n")
    with pytest.raises(TieringError, match="names no broker"):
        select_broker(config, 2, environ={})


def test_the_single_broker_form_with_a_broker_id_is_held_to_its_meta_properties(tmp_path: Path) -> None:
    config = parse_config(base_doc(tmp_path))
    with_meta(tmp_path, config, {tmp_path / "kafka": 1})
    assert select_broker(config, environ={BROKER_ID_ENV: "1"}).broker == BrokerConfig(
        1, (tmp_path / "kafka",), "tiering-broker-1"
    )
    with pytest.raises(ConfigError, match=r"log_dirs: .* belongs to broker 1 by its meta.properties, not to broker 2"):
        select_broker(config, 2, environ={})
    with pytest.raises(ConfigError, match=r"log_dirs: .* belongs to broker 1 by its meta.properties, not to broker 2"):
        select_broker(config, environ={BROKER_ID_ENV: "2"})


def test_the_single_broker_form_takes_its_id_from_its_log_dirs(tmp_path: Path) -> None:
    """Without ``--broker`` or ``TIERING_BROKER_ID`` the implicit broker is the one every log dir's
    ``meta.properties`` names; a log dir without one (a new disk) names none."""
    doc = base_doc(tmp_path)
    a, b = tmp_path / "kafka-a", tmp_path / "kafka-b"
    doc["log_dirs"] = [str(a), str(b)]
    config = parse_config(doc)
    a.mkdir()
    b.mkdir()
    assert select_broker(config, environ={}, required=True) is config  # none names its broker: as ever
    assert implied_broker_id(config) is None
    write_meta_properties(a, 3)
    chosen = select_broker(config, environ={}, required=True)
    assert chosen.broker == BrokerConfig(3, (a, b), "tiering-broker-3") and chosen.broker_id == 3
    assert chosen.log_dirs == (a, b) and chosen.brokers == {} and chosen.broker_ids is None
    write_meta_properties(b, 3)
    assert select_broker(config, environ={}).broker_id == 3  # both agree
    assert select_broker(config, 3, environ={}).broker_id == 3
    (b / "meta.properties").unlink()
    write_meta_properties(b, 4)
    with pytest.raises(ConfigError) as err:
        select_broker(config, environ={})
    message = str(err.value)
    assert message.startswith("log_dirs: the log dirs belong to different brokers by their meta.properties")
    assert f"{a / 'meta.properties'}: broker 3" in message and f"{b / 'meta.properties'}: broker 4" in message
    with pytest.raises(ConfigError, match=r"belongs to broker 4 by its meta.properties, not to broker 3"):
        select_broker(config, 3, environ={})  # named explicitly: held to every log dir as before
    (b / "meta.properties").write_text("version=1\nnode.id=oops\n")
    with pytest.raises(TieringError, match="names no broker"):
        select_broker(config, environ={})


def test_the_observation_staleness_and_the_process_s_broker_id(tmp_path: Path) -> None:
    config = parse_config(cluster_doc(tmp_path))
    assert config.observation_staleness_ms == 3 * 10 * 60_000  # three of the default copy schedules
    assert config.broker_id is None and config.broker_ids == frozenset({1, 2, 3})
    assert config.for_broker(2).broker_id == 2
    doc = cluster_doc(tmp_path)
    doc["cluster"] = {"observation_staleness_ms": 90_000}
    assert parse_config(doc).observation_staleness_ms == 90_000
    single = parse_config(base_doc(tmp_path))
    assert single.broker_id is None and single.broker_ids is None
    assert single.for_broker(4).broker_id == 4 and single.for_broker(4).broker_ids is None
    for section, message in (
        ({"observation_staleness_ms": 0}, "cluster.observation_staleness_ms: 0 is below the minimum 1"),
        ({"observation_staleness_ms": "soon"}, "cluster.observation_staleness_ms: expected an integer"),
        ({"staleness": 5}, "cluster.staleness: unknown key"),
        ([], "cluster: expected a mapping"),
    ):
        doc["cluster"] = section
        with pytest.raises(ConfigError, match=message):
            parse_config(doc)


def test_a_broker_names_its_metadata_log_dir_when_it_is_none_of_its_log_dirs(tmp_path: Path) -> None:
    """Kafka's ``metadata.log.dir``: where removal reads the KRaft metadata image (by default the
    one of the broker's log dirs that holds ``__cluster_metadata-0``)."""
    doc = cluster_doc(tmp_path)
    doc["brokers"][2]["metadata_log_dir"] = "meta-2"  # relative: beside the config
    config = parse_config(doc, base_dir=tmp_path)
    assert config.brokers[2].metadata_log_dir == tmp_path / "meta-2" and config.brokers[1].metadata_log_dir is None
    two = config.for_broker(2)
    assert (two.metadata_log_dir, two.metadata_log_dir_key) == (tmp_path / "meta-2", "brokers.2.metadata_log_dir")
    assert config.for_broker(1).metadata_log_dir is None
    doc = base_doc(tmp_path)
    doc["metadata_log_dir"] = str(tmp_path / "meta")
    single = parse_config(doc)
    assert (single.metadata_log_dir, single.metadata_log_dir_key) == (tmp_path / "meta", "metadata_log_dir")
    assert single.for_broker(4).metadata_log_dir == tmp_path / "meta"  # --broker keeps it
    assert parse_config(base_doc(tmp_path)).metadata_log_dir is None
