"""The inbox signs in with the OpenID provider in Chromium (Playwright): the sign-in
page offers the provider, its page picks the person, the inbox trades the code through
the API and calls the API with the ID token; a forged return signs nobody in."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from api.identity.oidc import OidcBearer
from api.identity.oidc_settings import OidcSettings
from tests.api.http_support import serve
from tests.api.identity.oidc_support import CLIENT, SECRET, Provider, api_app
from tests.support.inbox_browser import launched_chromium

pytestmark = [pytest.mark.browser,
              pytest.mark.filterwarnings("ignore::DeprecationWarning:authlib.*")]


@pytest.fixture
async def page() -> AsyncIterator[object]:
    async with launched_chromium() as browser:
        context = await browser.new_context()
        # The provider's page styles itself from a CDN: not reached from a test.
        await context.route("https://cdn.jsdelivr.net/**", lambda route: route.abort())
        yield await context.new_page()


@pytest.fixture
async def inbox(free_port: Callable[[], int]) -> AsyncIterator[tuple[str, object, Provider]]:
    provider = Provider()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    http = httpx.AsyncClient(timeout=5)
    bearer = OidcBearer(OidcSettings(issuer=provider.issuer, client_id=CLIENT,
                                     client_secret=SECRET, redirect_url=f"{url}/"),
                        role_of=lambda groups: "approver" if "approvers" in groups
                        else "viewer", http=http)
    app = api_app(bearer, with_inbox=True)
    try:
        async with serve(app, port):
            yield url, app, provider
    finally:
        await http.aclose()
        provider.stop()


async def test_a_person_signs_in_with_the_provider(page, inbox) -> None:
    from playwright.async_api import expect

    url, app, provider = inbox
    await page.goto(url + "/")
    # The API wants a credential: the sign-in page offers the provider as well.
    await expect(page.get_by_role("alert")).to_have_text("a bearer token is required")
    await page.get_by_role("button", name="Sign in with your identity provider").click()
    # The provider's page: pick the person.
    await page.wait_for_url(f"{provider.issuer}/oauth2/authorize?**")
    await page.get_by_role("button", name="alice").click()
    # Back in the inbox, signed in: the code is gone from the address bar.
    await page.wait_for_url(url + "/")
    await expect(page.locator("#signout")).to_be_visible()
    token = await page.evaluate("sessionStorage.getItem('hitlflow.api_token')")
    assert token.count(".") == 2
    assert await page.evaluate("sessionStorage.getItem('hitlflow.oidc_pending')") is None
    async with httpx.AsyncClient(base_url=url) as api:  # (uvicorn serves on this loop)
        me = await api.get("/api/me", headers={"Authorization": f"Bearer {token}"})
    assert (me.status_code, me.json()["subject"], me.json()["role"]) == \
        (200, "alice", "approver")
    # The code reached the API once, in the token route's body; the token never in a URL.
    seen = app.state.seen
    assert [s for s in seen if s.startswith("/api/auth/oidc/token")] == \
        ["/api/auth/oidc/token?"]
    assert not any(token in s for s in seen)
    assert any(s.startswith("/?code=") for s in seen)  # the provider's redirect, to the page
    assert not any("code=" in s for s in seen if s.startswith("/api/"))


async def test_a_return_not_started_in_this_tab_signs_nobody_in(page, inbox) -> None:
    from playwright.async_api import expect

    url, app, provider = inbox
    code = provider.authorize("alice", redirect_uri=f"{url}/")  # a real code, not ours
    await page.goto(f"{url}/?code={code}&state=forged")
    await expect(page.get_by_role("alert")).to_have_text(
        "This sign-in answer is not for a sign-in started in this tab.")
    assert page.url == url + "/"
    assert await page.evaluate("sessionStorage.getItem('hitlflow.api_token')") is None
    assert not any(s.startswith("/api/auth/oidc/token") for s in app.state.seen)
