//! `bpals-release rebuild DIR --audit` (in progress).
