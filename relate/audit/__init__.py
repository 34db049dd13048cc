"""Human audit of a relation corpus (stratified sampling, a durable verdict store, the report) and
the review of PoporoIN's proposed class pairs (answers, resolutions, kappa, the accepted pair lists)."""

from relate.audit.report import (agreement, build_audit_report, format_audit_report, item_labels,
                                 report_from_store, stratified_estimate, wilson_interval)
from relate.audit.review_report import (CATEGORIES, build_review_report, category_of, format_review_report,
                                        review_agreement, review_kappa, review_report_from_store,
                                        write_accepted_pairs)
from relate.audit.review_store import (CELL_QUESTIONS, CELLS, DECISIONS, PROPOSAL_COLUMNS, REJECT_REASONS, ReviewStore,
                                       check_answer, load_proposals, open_review_store)
from relate.audit.sampler import (BUCKETS, OTHER_FAMILY, STRATUM_KEYS, AuditBatch, AuditSampleConfig,
                                  bucket_of, family_of, load_audit_batch, relation_table, sample_audit_batch,
                                  stratum_counts, verify_batch, verify_corpus, write_audit_batch)
from relate.audit.store import (VERDICTS, AuditStoreError, UnknownItemError, VerdictStore, check_auditor,
                                open_verdict_store)

__all__ = [
    "AuditSampleConfig", "AuditBatch", "STRATUM_KEYS", "BUCKETS", "OTHER_FAMILY", "family_of", "bucket_of",
    "relation_table", "stratum_counts", "sample_audit_batch", "write_audit_batch", "load_audit_batch",
    "verify_batch", "verify_corpus",
    "VERDICTS", "VerdictStore", "AuditStoreError", "UnknownItemError", "open_verdict_store", "check_auditor",
    "wilson_interval", "item_labels", "agreement", "stratified_estimate", "build_audit_report",
    "report_from_store", "format_audit_report",
    "CELLS", "CELL_QUESTIONS", "DECISIONS", "REJECT_REASONS", "PROPOSAL_COLUMNS", "ReviewStore", "load_proposals", "check_answer",
    "open_review_store", "CATEGORIES", "category_of", "review_kappa", "review_agreement", "build_review_report",
    "review_report_from_store", "write_accepted_pairs", "format_review_report",
]
