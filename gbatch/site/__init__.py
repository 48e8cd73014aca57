"""What a site's admin configures: the head's config.yaml and every job's container policy.

The policy bounds every job. This package sits above jobspec/: its checks reuse the spec's
errors and patterns.
"""
