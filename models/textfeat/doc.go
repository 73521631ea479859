// Package textfeat turns request text into the numbers the router and the
// scheduler decide on: Unicode normalisation (NFC, invisible characters
// stripped, full-width punctuation mapped to ASCII), byte- and character-level
// Shannon entropy, and a fixed, versioned feature vector (Extract) with
// lengths, character-class ratios, repetition and hashed n-grams.
//
// How it fits: the agent extracts the vector for every request and feeds it to
// models/predictor; the vector travels in telemetry (transport/fleetwire
// RequestRecord.Features with FeatureVersion = Version) and becomes training
// data for the next predictor; cloud/sched reads ByteEntropy as its input
// entropy signal. Everything here is pure, allocation-light and safe for
// concurrent use.
package textfeat
