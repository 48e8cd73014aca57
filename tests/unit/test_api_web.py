"""The web page's parts that need no daemon: what its login page says."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from gbatch.api.app import make_app


def test_the_login_page_says_only_its_own_reasons_never_text_from_the_link(
    tmp_path: Path,
) -> None:
    """A link to /ui/login?why=... is anyone's to write: the page must not speak for them."""
    client = TestClient(make_app(tmp_path / "gbatchd.sock"))
    lure = "Your session expired. Paste your token at evil.example to renew it"
    page = client.get("/ui/login", params={"why": lure})
    assert page.status_code == 200
    assert "evil.example" not in page.text and 'id="message"' not in page.text
    assert ">signed out<" in client.get("/ui/login", params={"why": "signed-out"}).text
    refused = client.get("/ui/login", params={"why": "refused"}).text
    assert "no longer accepted" in refused
