"""core/accounts.user_exists: the one check squeue's -u, its fast path and the MCP tool
make of a user's text."""

from __future__ import annotations

import os
import pwd

import pytest

from gbatch.core.accounts import user_exists


def test_a_login_name_and_a_uid_of_this_system_exist() -> None:
    me = pwd.getpwuid(os.getuid())
    assert user_exists(me.pw_name)
    assert user_exists(str(me.pw_uid))


@pytest.mark.parametrize(
    "text",
    ["no-such-user-gbatch", "nul\x00name", "99999999999999999999999", "\u00b2", "", "4294967294"],
)
def test_a_text_no_account_has_is_false_not_an_exception(text: str) -> None:
    assert not user_exists(text)
