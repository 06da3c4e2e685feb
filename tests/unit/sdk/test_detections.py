"""Detections as arrays (``Detections``): they read exactly like the tuple of records they replace, the
decoders' records are the same as before, and the columns survive a pickle (the analytics process)."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest

from edgefleet.sdk import Detection, Detections, Keypoint, Mask
from edgefleet.sdk._detections import label_counts, label_table, track_codes

LABELS = ("person", "car", "dog")


def _dets(track: bool = False) -> Detections:
    boxes = np.array([[1, 2, 3, 4], [5.5, 6, 7, 8], [0, 0, 10, 10]], np.float32)
    scores = np.array([0.9, 0.5, 0.25], np.float32)
    classes = np.array([0, 2, 0], np.int64)
    tracks = None
    if track:
        tracks = (np.array([7, 0, 0]), np.array([3, 1, 0]), track_codes(["tracked", "tentative", ""]))
    return Detections(boxes, scores, classes, LABELS, track=tracks)


def test_they_read_like_the_records_they_stand_for() -> None:
    d = _dets()
    records = (
        Detection((1.0, 2.0, 3.0, 4.0), float(np.float32(0.9)), 0, "person"),
        Detection((5.5, 6.0, 7.0, 8.0), 0.5, 2, "dog"),
        Detection((0.0, 0.0, 10.0, 10.0), 0.25, 0, "person"),
    )
    assert d == records and records == d and len(d) == 3 and bool(d)
    assert d[1] == records[1] and d[-1] == records[2] and d[:2] == records[:2]
    assert list(d) == list(records) and tuple(d) == records
    extra = records[:1]
    assert d + extra == records + extra and extra + d == extra + records  # what a tuple does
    assert hash(d) == hash(records)
    assert d.labels() == ["person", "dog", "person"] and not d.tracked
    assert not Detections(np.zeros((0, 4)), np.zeros(0), np.zeros(0, np.int64), LABELS)


def test_track_columns_become_the_records_track_fields() -> None:
    d = _dets(track=True)
    assert [(x.track_id, x.track_age, x.track_state) for x in d] == [
        (7, 3, "tracked"),
        (None, 1, "tentative"),
        (None, 0, ""),
    ]
    again = _dets().with_tracks(*(getattr(d, f) for f in ("track_ids", "track_ages", "track_states")))
    assert again == d and again.tracked


def test_records_round_trip_through_columns_with_masks_keypoints_and_two_classes_of_one_label() -> None:
    records = (
        Detection((1.0, 2.0, 3.0, 4.0), 0.5, 4, "car", 3, 2, "tracked", mask=Mask(polygons=((1.0, 2.0, 3.0, 4.0),))),
        Detection((1.0, 2.0, 3.0, 4.0), 0.75, 9, "car", keypoints=(Keypoint(1.0, 2.0, 0.5),)),
        Detection((0.0, 1.0, 2.0, 3.0), 0.25, 4, "truck"),  # the same number, another label: kept as given
    )
    d = Detections.from_records(records)
    assert d == records and d.tracked
    rebuilt = Detections(
        d.boxes,
        d.scores,
        d.class_ids,
        d.label_table,
        label_index=d.label_index,
        track=(d.track_ids, d.track_ages, d.track_states),
        masks=d.masks,
        keypoints=d.keypoints,
    )
    assert rebuilt == records


def test_they_survive_a_pickle() -> None:
    for d in (_dets(), _dets(track=True)):
        back = pickle.loads(pickle.dumps(d))
        assert back == d and back.tracked == d.tracked
        assert np.array_equal(back.boxes, d.boxes)


def test_a_class_past_the_labels_is_named_by_its_number_as_on_a_record() -> None:
    table, index = label_table(LABELS, np.array([1, 5, 1, 3]))
    d = Detections(np.zeros((4, 4)), np.ones(4), np.array([1, 5, 1, 3]), table, label_index=index)
    assert d.labels() == ["car", "5", "car", "3"] and [x.class_id for x in d] == [1, 5, 1, 3]
    same, idx = label_table(LABELS, np.array([0, 2]))
    assert same is LABELS and np.array_equal(idx, [0, 2])


def test_bad_columns_are_refused() -> None:
    with pytest.raises(ValueError, match="disagree"):
        Detections(np.zeros((2, 4)), np.zeros(3), np.zeros(3, np.int64), LABELS)
    with pytest.raises(ValueError, match="outside"):
        Detections(np.zeros((1, 4)), np.zeros(1), np.array([3]), LABELS)
    with pytest.raises(ValueError, match="one per detection"):
        Detections(np.zeros((1, 4)), np.zeros(1), np.array([0]), LABELS, track=(np.zeros(2), np.zeros(1), np.zeros(1)))


def test_label_counts_of_columns_and_records_alike() -> None:
    records = tuple(_dets())
    assert label_counts([_dets(), records, ()]) == Counter({"person": 4, "dog": 2})


def test_the_decoders_give_columns_whose_records_match_the_boxes(toy_models: dict[str, object]) -> None:
    """A pipeline's results carry Detections from the built-in decoders, and their records agree with
    the columns (boxes in source pixels, the model's labels)."""
    from pathlib import Path

    from edgefleet.sdk import Pipeline

    model = toy_models["yolo"]
    assert isinstance(model, Path)
    with Pipeline(model, ["synthetic:?width=64&height=48&frames=4&live=false"], max_batch=2) as p:
        results = list(p.results(timeout=60))
    assert len(results) == 4
    for r in results:
        d = r.detections
        assert isinstance(d, Detections) and len(d) > 0
        assert [x.box for x in d] == [tuple(b) for b in d.boxes.tolist()]
        assert [x.label for x in d] == d.labels() and set(d.labels()) <= {"person", "car", "dog"}
        assert not d.boxes.flags.writeable
