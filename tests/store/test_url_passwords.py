"""A store URL's password is masked in both forms: ``user:pw@host`` and ``?password=pw`` (libpq's query)."""

from __future__ import annotations

import pytest

from nsightwrap.store.location import StoreLocation, mask_url

FORMS = ["postgresql://team:s3cret@db.example/hangs",
         "postgresql://team@db.example/hangs?password=s3cret",
         "postgresql://team@db.example/hangs?sslmode=require&password=s3cret",
         "postgresql://team@db.example/hangs?PASSWORD=s3cret&sslmode=require"]


@pytest.mark.parametrize("url", FORMS)
def test_a_store_urls_password_is_masked_wherever_it_is_given(url):
    location = StoreLocation(url=url)
    assert location.password == "s3cret"
    for shown in (mask_url(url), location.shown, str(location), repr(location),
                  location.mask(f"connection to {url} failed: password s3cret refused")):
        assert "s3cret" not in shown and "***" in shown, shown
    assert "sslmode=require" in mask_url(url) or "sslmode" not in url


def test_a_percent_encoded_query_password_is_masked_as_the_driver_writes_it():
    location = StoreLocation(url="postgresql://team@db/hangs?password=a%2Fb")
    assert "a/b" not in location.mask("password a/b refused") and "a%2Fb" not in location.shown
