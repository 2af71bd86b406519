"""Data-level tests of the HTML report's payload (no HTML involved)."""

from __future__ import annotations

import json

import pytest
from report_factories import SECRET_URL, evidence, large_evidence, result_of

from hangscope.ranges import parse_ranks
from hangscope.report.payload import MAX_DETAIL_RANKS, MAX_FR_ENTRIES, build_payload


def S(payload, index):
    return None if index < 0 else payload["strings"][index]


def decode_tree(payload):
    """Python mirror of the page's tree decoder: {path of frame names: rank text}."""
    tree, out = payload["tree"], {}
    names = []
    for node, (parent, frame) in enumerate(zip(tree["parent"], tree["frame"])):
        name = S(payload, payload["frames"]["name"][frame])
        names.append(name if parent < 0 else names[parent] + " > " + name)
        out[names[-1]] = S(payload, tree["ranks"][node])
    return out


@pytest.fixture(scope="module")
def small():
    return build_payload(result_of(evidence(world=4, culprit=2)))


@pytest.fixture(scope="module")
def large():
    return build_payload(result_of(large_evidence()))


class TestSmallJob:
    def test_the_root_finding_names_the_culprit_and_collective(self, small):
        # GIVEN a 4-rank job where rank 2 never entered all_reduce seq 10
        root = small["findings"][0]
        # THEN the payload's first finding says so, with ranges for ranks
        assert root["kind"] == "missing_rank"
        assert root["culprits"] == "2"
        assert root["waiting"] == "0,1,3"
        assert root["collective"]["seq"] == 10 and root["collective"]["op"] == "all_reduce"
        assert small["summary"]["status"] == "hang"

    def test_strings_are_interned_once(self, small):
        assert len(small["strings"]) == len(set(small["strings"]))
        frames = small["frames"]
        keys = list(zip(frames["name"], frames["file"], frames["line"]))
        assert len(keys) == len(set(keys))

    def test_classes_are_columns_of_equal_length(self, small):
        cols = small["classes"]
        assert len({len(v) for v in cols.values()}) == 1
        by_role = {S(small, r): parse_ranks(ranks) for r, ranks in zip(cols["role"], cols["ranks"])}
        assert by_role == {"waiting": [0, 1, 3], "culprit": [2]}

    def test_every_rank_of_a_small_job_has_full_detail(self, small):
        assert sorted(small["details"], key=int) == ["0", "1", "2", "3"]
        culprit = small["details"]["2"]
        main = culprit["stacks"]["threads"]
        names = [S(small, small["frames"]["name"][f]) for f in main["stack"][0]]
        assert names[:2] == ["load_batch", "main"]
        assert culprit["proc"]["rss"] == [2 << 30]
        assert [S(small, w) for w in culprit["logs"]["where"]] == ["logs/rank2.log:122"]

    def test_fr_detail_marks_the_pending_entry(self, small):
        group = small["details"]["0"]["fr"]["groups"][0]
        assert group["total"] == 10
        assert group["entries"]["seq"][group["pending"]] == 10
        assert group["entries"]["done"][group["pending"]] is False
        assert small["details"]["2"]["fr"]["groups"][0]["pending"] == -1

    def test_workers_are_listed(self, small):
        workers = small["details"]["0"]["workers"]
        assert [w["pid"] for w in workers] == [2000]
        assert [S(small, s) for s in workers[0]["proc"]["status"]] == ["D"]

    def test_merged_tree_splits_where_the_culprit_diverges(self, small):
        tree = decode_tree(small)
        assert tree["<module>"] == "0-3"
        assert tree["<module> > main > train_step"] == "0,1,3"
        assert tree["<module> > main > load_batch"] == "2"
        assert small["tree"]["source"] == "py-spy"

    def test_without_samples_the_tree_comes_from_fr_call_stacks(self):
        payload = build_payload(result_of(evidence(samples=False)))
        assert payload["tree"]["source"] == "flight_recorder"
        tree = decode_tree(payload)
        assert tree["<module> > main > train_step > all_reduce"] == "0,1,3"
        assert tree["<module> > main > log_metrics > all_reduce"] == "2"

    def test_secrets_are_redacted_by_default(self):
        result = result_of(evidence())
        text = json.dumps(build_payload(result))
        assert "hunter2secret" not in text
        assert "[REDACTED]" in text
        assert "hunter2secret" in json.dumps(build_payload(result, redact_secrets=False))
        assert SECRET_URL.startswith("https://alice:")

    def test_payload_is_deterministic_json(self):
        first = json.dumps(build_payload(result_of(evidence())), sort_keys=True)
        assert first == json.dumps(build_payload(result_of(evidence())), sort_keys=True)


class TestLargeJob:
    def test_4096_ranks_collapse_into_two_classes(self, large):
        cols = large["classes"]
        assert cols["count"] == [4095, 1] or sorted(cols["count"]) == [1, 4095]
        assert "2051" in cols["ranks"]
        assert len(large["ranks"]["rank"]) == 4096

    def test_detail_is_bounded(self, large):
        assert len(large["details"]) <= MAX_DETAIL_RANKS
        assert "2051" in large["details"]  # the culprit always has detail
        for detail in large["details"].values():
            for group in detail["fr"]["groups"]:
                assert len(group["entries"]["rid"]) <= MAX_FR_ENTRIES
        assert any("full detail kept for" in note for note in large["notes"])

    def test_payload_stays_small(self, large):
        size = len(json.dumps(large, sort_keys=True, separators=(",", ":")))
        assert size < 1_000_000, size
