"""The storage contract (see `s3queue.storage`), run against every backend."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from harness import Unseekable
from s3queue.errors import Conflict
from s3queue.storage import Storage, new_token, s3


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class TestGetHead:
    def test_missing_key_is_none(self, storage: Storage) -> None:
        assert storage.get("q/none") is None
        assert storage.head("q/none") is None

    def test_get_returns_what_put_wrote(self, storage: Storage) -> None:
        before = now_ms()
        etag = storage.put("q/a", b"\x00body\xff")
        after = now_ms()

        obj = storage.get("q/a")

        assert obj is not None
        assert (obj.key, obj.body, obj.etag) == ("q/a", b"\x00body\xff", etag)
        # S3 stores Last-Modified with one-second precision.
        assert before - 1000 <= obj.last_modified_ms <= after + 1000

    def test_etag_is_unquoted(self, storage: Storage) -> None:
        etag = storage.put("q/a", b"x")
        assert etag and '"' not in etag

    def test_head_returns_etag_and_token_of_the_last_write(self, storage: Storage) -> None:
        storage.put("q/a", b"one", token="tok-1")
        etag = storage.put("q/a", b"two", token="tok-2")
        head = storage.head("q/a")
        assert head is not None and (head.etag, head.token) == (etag, "tok-2")

    def test_head_token_is_none_without_one(self, storage: Storage) -> None:
        etag = storage.put("q/a", b"x")
        head = storage.head("q/a")
        assert head is not None and (head.etag, head.token) == (etag, None)


class TestPut:
    def test_etag_changes_when_the_body_changes(self, storage: Storage) -> None:
        etags = {storage.put("q/a", f"v{i}".encode()) for i in range(3)}
        assert len(etags) == 3

    def test_unconditional_put_overwrites(self, storage: Storage) -> None:
        storage.put("q/a", b"old")
        storage.put("q/a", b"new")
        assert (obj := storage.get("q/a")) is not None and obj.body == b"new"

    def test_if_none_match_creates(self, storage: Storage) -> None:
        etag = storage.put("q/a", b"x", if_none_match=True)
        assert (head := storage.head("q/a")) is not None and head.etag == etag

    def test_if_none_match_on_existing_key_is_conflict(self, storage: Storage) -> None:
        storage.put("q/a", b"first")
        with pytest.raises(Conflict):
            storage.put("q/a", b"second", if_none_match=True)
        assert (obj := storage.get("q/a")) is not None and obj.body == b"first"

    def test_if_match_current_etag_swaps(self, storage: Storage) -> None:
        etag = storage.put("q/a", b"v1")
        new = storage.put("q/a", b"v2", if_match=etag)
        assert new != etag
        assert (obj := storage.get("q/a")) is not None and (obj.body, obj.etag) == (b"v2", new)

    def test_if_match_stale_etag_is_conflict(self, storage: Storage) -> None:
        stale = storage.put("q/a", b"v1")
        current = storage.put("q/a", b"v2")
        with pytest.raises(Conflict):
            storage.put("q/a", b"v3", if_match=stale)
        assert (head := storage.head("q/a")) is not None and head.etag == current

    def test_if_match_on_missing_key_is_conflict(self, storage: Storage) -> None:
        etag = storage.put("q/a", b"v1")
        storage.delete("q/a")
        with pytest.raises(Conflict):
            storage.put("q/a", b"v2", if_match=etag)
        assert storage.get("q/a") is None


class TestTokenRecognition:
    """A write whose response was lost is retried; the retry's Conflict is our own write."""

    def test_create_retried_with_same_token_returns_the_etag(self, storage: Storage) -> None:
        token = new_token()
        first = storage.put("q/a", b"x", if_none_match=True, token=token)
        # GIVEN the response of `first` was lost, WHEN the writer retries the same write
        again = storage.put("q/a", b"x", if_none_match=True, token=token)
        # THEN it is recognised as its own, not a Conflict
        assert again == first

    def test_create_with_another_token_is_conflict(self, storage: Storage) -> None:
        storage.put("q/a", b"x", if_none_match=True, token=new_token())
        with pytest.raises(Conflict):
            storage.put("q/a", b"x", if_none_match=True, token=new_token())

    def test_swap_retried_with_same_token_returns_the_new_etag(self, storage: Storage) -> None:
        base = storage.put("q/a", b"v1", token=new_token())
        token = new_token()
        swapped = storage.put("q/a", b"v2", if_match=base, token=token)
        assert storage.put("q/a", b"v2", if_match=base, token=token) == swapped

    def test_swap_with_another_token_is_conflict(self, storage: Storage) -> None:
        base = storage.put("q/a", b"v1", token=new_token())
        storage.put("q/a", b"v2", if_match=base, token=new_token())
        with pytest.raises(Conflict):
            storage.put("q/a", b"v3", if_match=base, token=new_token())

    def test_without_token_a_retry_is_conflict(self, storage: Storage) -> None:
        storage.put("q/a", b"x", if_none_match=True)
        with pytest.raises(Conflict):
            storage.put("q/a", b"x", if_none_match=True)


class TestDelete:
    def test_delete_removes(self, storage: Storage) -> None:
        storage.put("q/a", b"x")
        storage.delete("q/a")
        assert storage.get("q/a") is None

    def test_delete_missing_key_is_fine(self, storage: Storage) -> None:
        storage.put("q/other", b"x")
        storage.delete("q/none")
        assert storage.get("q/none") is None
        assert [e.key for e in storage.list("q/").entries] == ["q/other"]

    def test_delete_if_match_current_etag_removes(self, storage: Storage) -> None:
        etag = storage.put("q/a", b"x")
        storage.delete("q/a", if_match=etag)
        assert storage.head("q/a") is None

    def test_delete_if_match_stale_etag_is_conflict(self, storage: Storage) -> None:
        stale = storage.put("q/a", b"v1")
        storage.put("q/a", b"v2")
        with pytest.raises(Conflict):
            storage.delete("q/a", if_match=stale)
        assert (obj := storage.get("q/a")) is not None and obj.body == b"v2"

    def test_delete_if_match_on_missing_key_is_fine(self, storage: Storage) -> None:
        etag = storage.put("q/a", b"x")
        storage.put("q/other", b"y")
        storage.delete("q/a")
        storage.delete("q/a", if_match=etag)
        storage.delete("q/never", if_match="0123456789abcdef0123456789abcdef")
        assert storage.head("q/a") is None
        assert storage.head("q/never") is None
        assert [e.key for e in storage.list("q/").entries] == ["q/other"]

    def test_delete_many_removes_present_and_ignores_missing(self, storage: Storage) -> None:
        for key in ("q/a", "q/b", "q/c"):
            storage.put(key, b"x")
        storage.delete_many(["q/a", "q/missing", "q/c"])
        assert [e.key for e in storage.list("q/").entries] == ["q/b"]

    def test_delete_many_of_nothing_is_fine(self, storage: Storage) -> None:
        etag = storage.put("q/a", b"x")
        storage.delete_many([])
        storage.delete_many(iter(()))
        head = storage.head("q/a")
        assert head is not None and (head.etag, head.token, head.size) == (etag, None, 1)


class TestList:
    KEYS = ("q/msg/002", "q/msg/000", "q/msg/001", "q/msga", "q/other/1", "p/msg/000")

    @pytest.fixture
    def filled(self, storage: Storage) -> Storage:
        for key in self.KEYS:
            storage.put(key, key.encode())
        return storage

    def test_lists_keys_under_prefix_in_order(self, filled: Storage) -> None:
        page = filled.list("q/msg/")
        assert [e.key for e in page.entries] == ["q/msg/000", "q/msg/001", "q/msg/002"]
        assert not page.truncated

    def test_prefix_is_a_string_prefix_not_a_folder(self, filled: Storage) -> None:
        keys = [e.key for e in filled.list("q/msg").entries]
        assert keys == ["q/msg/000", "q/msg/001", "q/msg/002", "q/msga"]

    def test_entries_carry_etag_and_size(self, storage: Storage) -> None:
        etag = storage.put("q/a", b"12345")
        [entry] = storage.list("q/").entries
        assert (entry.key, entry.etag, entry.size) == ("q/a", etag, 5)
        assert abs(entry.last_modified_ms - now_ms()) < 60_000

    def test_start_after_is_exclusive(self, filled: Storage) -> None:
        keys = [e.key for e in filled.list("q/msg/", start_after="q/msg/000").entries]
        assert keys == ["q/msg/001", "q/msg/002"]

    def test_start_after_between_keys(self, filled: Storage) -> None:
        keys = [e.key for e in filled.list("q/msg/", start_after="q/msg/0005").entries]
        assert keys == ["q/msg/001", "q/msg/002"]

    def test_start_after_before_the_prefix(self, filled: Storage) -> None:
        keys = [e.key for e in filled.list("q/msg/", start_after="a").entries]
        assert keys == ["q/msg/000", "q/msg/001", "q/msg/002"]

    def test_limit_truncates_and_start_after_resumes(self, filled: Storage) -> None:
        first = filled.list("q/msg/", limit=2)
        assert [e.key for e in first.entries] == ["q/msg/000", "q/msg/001"]
        assert first.truncated
        rest = filled.list("q/msg/", start_after=first.entries[-1].key, limit=2)
        assert [e.key for e in rest.entries] == ["q/msg/002"]
        assert not rest.truncated

    def test_limit_equal_to_the_count_is_not_truncated(self, filled: Storage) -> None:
        page = filled.list("q/msg/", limit=3)
        assert len(page.entries) == 3 and not page.truncated

    def test_empty_prefix_lists_nothing_and_is_not_truncated(self, filled: Storage) -> None:
        page = filled.list("nothing/")
        assert page.entries == [] and not page.truncated

    def test_list_sees_writes_and_deletes_at_once(self, storage: Storage) -> None:
        storage.put("q/a", b"x")
        assert [e.key for e in storage.list("q/").entries] == ["q/a"]
        storage.delete("q/a")
        assert storage.list("q/").entries == []

    def test_limit_of_one_walks_every_key_in_order(self, filled: Storage) -> None:
        walked, start = [], None
        while True:
            page = filled.list("q/", start_after=start, limit=1)
            walked += [e.key for e in page.entries]
            if not page.truncated:
                break
            start = page.entries[-1].key
        assert walked == ["q/msg/000", "q/msg/001", "q/msg/002", "q/msga", "q/other/1"]

    def test_keys_with_url_special_characters(self, storage: Storage) -> None:
        keys = ["q/inbox/a b+c=d&e.json", "q/inbox/ünï%20code?.txt"]
        for key in keys:
            storage.put(key, b"x")
        assert [e.key for e in storage.list("q/inbox/").entries] == sorted(keys)
        assert all(storage.get(key) is not None for key in keys)


class TestListFolders:
    def test_lists_each_folder_once_in_order_without_the_loose_keys(self, storage: Storage) -> None:
        for key in ("q/parts/b/1", "q/parts/b/2", "q/parts/a-b/1", "q/parts/a/x/deep", "q/parts/z"):
            storage.put(key, b"x")
        storage.put("q/partsy/c/1", b"x")  # a string prefix, not a folder: not listed
        assert storage.list_folders("q/parts/") == ("q/parts/a-b/", "q/parts/a/", "q/parts/b/")

    def test_nothing_there_is_no_folders(self, storage: Storage) -> None:
        assert storage.list_folders("q/parts/") == ()

    def test_pages_through_many_folders(
        self, storage: Storage, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(s3, "FOLDER_PAGE", 2)  # S3Storage pages by 2: three pages here
        for i in range(5):
            storage.put(f"q/parts/{i}/1", b"x")
            storage.put(f"q/parts/{i}/2", b"x")
        folders = storage.list_folders("q/parts/")
        assert folders == tuple(f"q/parts/{i}/" for i in range(5))


class TestStartAfterAFolderName:
    """AWS compares keys as strings: ``q/inbox/a`` sorts after ``q/inbox``, so a listing that
    starts after a folder's bare name includes that folder. SeaweedFS skipped the whole folder
    (issue 9 item 3); `S3Storage` now gives the AWS answer there too."""

    AFTER_INBOX = ("q/inbox/a.json", "q/inbox/b.json", "q/msg/1", "q/tickets/1")
    KEYS = ("q/coordinator", "q/dlq/1", *AFTER_INBOX)

    @pytest.fixture
    def queue(self, storage: Storage) -> Storage:
        for key in self.KEYS:
            storage.put(key, b"x")
        return storage

    def test_lists_the_folder(self, queue: Storage) -> None:
        page = queue.list("q/", start_after="q/inbox")
        assert [e.key for e in page.entries] == list(self.AFTER_INBOX) and not page.truncated

    def test_inside_the_folder_lists_it_too(self, queue: Storage) -> None:
        assert [e.key for e in queue.list("q/", start_after="q/inbox/").entries] == list(
            self.AFTER_INBOX
        )

    def test_one_key_at_a_time(self, queue: Storage) -> None:
        page = queue.list("q/", start_after="q/inbox", limit=1)
        assert [e.key for e in page.entries] == ["q/inbox/a.json"] and page.truncated

    def test_a_folder_that_is_the_prefix_itself(self, queue: Storage) -> None:
        assert [e.key for e in queue.list("q", start_after="q").entries] == sorted(self.KEYS)

    def test_the_next_folder_and_not_the_one_named(self, queue: Storage) -> None:
        # "q/inbox0" sorts after every "q/inbox/..." key ("0" follows "/").
        assert [e.key for e in queue.list("q/", start_after="q/inbox0").entries] == [
            "q/msg/1",
            "q/tickets/1",
        ]

    def test_a_walk_sees_every_key_once_where_folder_and_string_order_differ(
        self, storage: Storage
    ) -> None:
        # SeaweedFS lists "a/..." before "a-b" (a folder walk), AWS after ("-" sorts before
        # "/"): the order may differ, but a walk from each last key must see every key once.
        keys = ["s/a/x", "s/a/y/1", "s/a-b/z", "s/a.c", "s/a0/w", "s/b"]
        for key in keys:
            storage.put(key, b"x")
        walked, start = [], None
        while True:
            page = storage.list("s/", start_after=start, limit=1)
            walked += [e.key for e in page.entries]
            if not page.truncated:
                break
            start = page.entries[-1].key
        assert sorted(walked) == sorted(keys)

    def test_a_folder_inside_the_listed_prefix(self, storage: Storage) -> None:
        for key in ("q/inbox/x/1.json", "q/inbox/x/2.json", "q/inbox/y.json"):
            storage.put(key, b"x")
        keys = [e.key for e in storage.list("q/inbox/", start_after="q/inbox/x").entries]
        assert keys == ["q/inbox/x/1.json", "q/inbox/x/2.json", "q/inbox/y.json"]


class TestMetadata:
    """User metadata (``x-amz-meta-*``): what another service's PUT carries as attributes."""

    def test_get_and_head_return_the_metadata_lowercased(self, storage: Storage) -> None:
        storage.put("q/a", b"body", metadata={"Tenant": "acme", "trace-id": "t-1"})
        obj, head = storage.get("q/a"), storage.head("q/a")
        assert obj is not None and obj.metadata == {"tenant": "acme", "trace-id": "t-1"}
        assert head is not None and head.metadata == obj.metadata and head.size == 4

    def test_the_writers_token_is_not_metadata(self, storage: Storage) -> None:
        storage.put("q/a", b"x", token="tok-1", metadata={"tenant": "acme"})
        obj, head = storage.get("q/a"), storage.head("q/a")
        assert obj is not None and obj.metadata == {"tenant": "acme"}
        assert head is not None and (head.token, head.metadata) == ("tok-1", {"tenant": "acme"})

    def test_no_metadata_is_an_empty_dict(self, storage: Storage) -> None:
        storage.put("q/a", b"x", token="tok-1")
        assert (obj := storage.get("q/a")) is not None and obj.metadata == {}


class TestStreams:
    """Large objects: a streamed read, a write from a file, a server-side copy."""

    def test_open_streams_the_object_in_pieces(self, storage: Storage) -> None:
        body = bytes(range(256)) * 1000
        etag = storage.put("q/big", body)
        stream = storage.open("q/big", etag=etag)
        assert stream is not None
        with stream:
            pieces = [stream.read(1000), stream.read(99_000)]
            pieces.append(stream.read())
        assert [len(p) for p in pieces] == [1000, 99_000, 156_000]
        assert b"".join(pieces) == body

    def test_open_a_missing_key_is_none(self, storage: Storage) -> None:
        assert storage.open("q/none") is None
        assert storage.open("q/none", etag="0123") is None

    def test_open_another_version_is_conflict(self, storage: Storage) -> None:
        stale = storage.put("q/a", b"v1")
        storage.put("q/a", b"v2")
        with pytest.raises(Conflict):
            storage.open("q/a", etag=stale)

    def test_put_file_from_a_path_and_from_a_file_object(
        self, storage: Storage, tmp_path: Path
    ) -> None:
        path = tmp_path / "payload.bin"
        path.write_bytes(b"\x00payload\xff" * 1000)
        head = storage.put_file("q/from-path", path)
        assert head.size == 9_000
        with path.open("rb") as source:
            assert storage.put_file("q/from-file", source).size == 9_000
        storage.put_file("q/unseekable", io.BufferedReader(Unseekable(path.read_bytes())))
        for key in ("q/from-path", "q/from-file", "q/unseekable"):
            assert (obj := storage.get(key)) is not None and obj.body == path.read_bytes()

    def test_copy_copies_the_version_it_names(self, storage: Storage) -> None:
        etag = storage.put("q/src", b"payload")
        storage.copy("q/src", "q/dst", if_match=etag, size=7)
        assert (obj := storage.get("q/dst")) is not None and obj.body == b"payload"
        storage.put("q/src", b"changed")
        with pytest.raises(Conflict):
            storage.copy("q/src", "q/dst2", if_match=etag, size=7)
        storage.delete("q/src")
        with pytest.raises(Conflict):
            storage.copy("q/src", "q/dst3", if_match=etag, size=7)
        assert storage.get("q/dst2") is None and storage.get("q/dst3") is None

    def test_copy_without_a_version_copies_what_is_there(self, storage: Storage) -> None:
        storage.put("q/src", b"payload")
        storage.copy("q/src", "q/dst", if_match=None, size=7)
        assert (obj := storage.get("q/dst")) is not None and obj.body == b"payload"
        storage.delete("q/src")
        with pytest.raises(Conflict):
            storage.copy("q/src", "q/dst2", if_match=None, size=7)
