"""Study data: a reproducible real-text corpus built from pinned Debian packages (`study.debian_corpus`)."""
