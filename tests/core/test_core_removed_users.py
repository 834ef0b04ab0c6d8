"""When the service takes off what users deleted from the Hub left: the grace, the users who
come back, and the rounds in which the Hub itself is in doubt."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from jhub_gpubooking.core.removed_users import UsersCheck, check_users

T0 = datetime(2030, 1, 7, 10, 0, tzinfo=timezone.utc)
GRACE = timedelta(hours=24)


def check(present, missing_since=None, now=T0, max_at_once=5):
    return check_users(present, missing_since or {}, now, GRACE, max_at_once)


def test_a_user_found_missing_waits_out_the_grace():
    first = check({"ada": True, "bob": False})
    assert first == UsersCheck(missing_since={"bob": T0}, newly_missing=("bob",))
    later = check({"ada": True, "bob": False}, first.missing_since, T0 + timedelta(hours=23))
    assert later == UsersCheck(missing_since={"bob": T0})
    due = check({"ada": True, "bob": False}, later.missing_since, T0 + GRACE)
    # still in missing_since until the removal is done (a cut-short removal is due again)
    assert due == UsersCheck(missing_since={"bob": T0}, due=("bob",))


def test_without_grace_a_missing_user_is_due_in_the_round_that_finds_them():
    assert check_users({"bob": False}, {}, T0, timedelta(0), 5) == UsersCheck(
        missing_since={"bob": T0}, newly_missing=("bob",), due=("bob",))


def test_a_user_back_in_the_hub_keeps_everything_and_starts_afresh_if_missing_again():
    back = check({"bob": True}, {"bob": T0}, T0 + timedelta(hours=2))
    assert back == UsersCheck(back=("bob",))
    again = check({"bob": False}, back.missing_since, T0 + timedelta(hours=30))
    assert again == UsersCheck(missing_since={"bob": T0 + timedelta(hours=30)},
                               newly_missing=("bob",))


def test_a_user_the_hub_gave_no_answer_for_keeps_their_time():
    # only users asked this round are in present: cy's answer is missing, her time runs on
    result = check({"ada": True}, {"cy": T0}, T0 + GRACE)
    assert result == UsersCheck(missing_since={"cy": T0})


def test_too_many_missing_at_once_takes_nothing_off_and_stops_every_clock():
    present = {f"user{n}": False for n in range(3)} | {"ada": True, "bob": False}
    earlier = {"bob": T0, "cy": T0}  # cy was not asked this round: her time runs on
    result = check(present, earlier, T0 + GRACE, max_at_once=2)
    assert result == UsersCheck(missing_since={"cy": T0}, held_back=4)
    # users come back one by one (logging in again): the last two missing start a new grace
    # instead of being due at once for a time that began before the Hub was in doubt
    later = T0 + 2 * GRACE
    fewer = check({"ada": True, "bob": False, "user0": True, "user1": True, "user2": False},
                  result.missing_since, later, max_at_once=2)
    assert fewer == UsersCheck(missing_since={"cy": T0, "bob": later, "user2": later},
                               newly_missing=("bob", "user2"))
    assert check({"bob": False}, fewer.missing_since, later + GRACE).due == ("bob",)
