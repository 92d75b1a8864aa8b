"""The secrets of the demo and the tests: public in this repository, so production refuses to
start with any of them (production.py). base.py, local.py and test.py take their defaults from
here."""

# ruff: noqa: S105 (hard-coded on purpose: these are the secrets production must refuse)

DEVELOPMENT_SECRET_KEY = "django-insecure-local-development-key-not-for-production"
DEVELOPMENT_FIELD_ENCRYPTION_KEY = "Y29tcHV0ZXNoYXJlLWRldi1rZXktbm90LWZvci11c2U="

DEMO_STRIPE_SECRET_KEY = "sk_test_computeshare_demo"
DEMO_STRIPE_PUBLISHABLE_KEY = "pk_test_computeshare_demo"
DEMO_STRIPE_WEBHOOK_SECRET = "whsec_computeshare_demo"

TEST_STRIPE_SECRET_KEY = "sk_test_computeshare"
TEST_STRIPE_PUBLISHABLE_KEY = "pk_test_computeshare"
TEST_STRIPE_WEBHOOK_SECRET = "whsec_computeshare_tests"

KNOWN_SECRETS: dict[str, frozenset[str]] = {
    "SECRET_KEY": frozenset({DEVELOPMENT_SECRET_KEY}),
    "FIELD_ENCRYPTION_KEY": frozenset({DEVELOPMENT_FIELD_ENCRYPTION_KEY}),
    "STRIPE_SECRET_KEY": frozenset({DEMO_STRIPE_SECRET_KEY, TEST_STRIPE_SECRET_KEY}),
    "STRIPE_PUBLISHABLE_KEY": frozenset({DEMO_STRIPE_PUBLISHABLE_KEY, TEST_STRIPE_PUBLISHABLE_KEY}),
    "STRIPE_WEBHOOK_SECRET": frozenset({DEMO_STRIPE_WEBHOOK_SECRET, TEST_STRIPE_WEBHOOK_SECRET}),
}
