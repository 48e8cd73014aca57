"""What a site's admin configures: the head's config.yaml and the container policy that
bounds every job. Above jobspec/ (its checks reuse the spec's errors and patterns)."""
