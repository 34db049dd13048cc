"""``python -m relate.audit --set corpus=DIR --set out=batch.json``: draw an audit batch."""

from relate.audit.sampler import AuditSampleConfig, main
from relate.config import parse_job_args

if __name__ == "__main__":  # pragma: no cover
    main(parse_job_args(AuditSampleConfig, description="Draw a stratified audit batch from a corpus."))
