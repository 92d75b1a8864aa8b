"""Webhooks for organizations: endpoints an admin registers, events recorded in an outbox in
the same transaction as the change that causes them, and deliveries signed the way Stripe signs
its events, retried with backoff, in order per object. Other apps call `events.event_record`
(or `events_record`) and nothing else; this app imports no app above it."""
