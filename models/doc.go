// Package models holds every learned or numeric artifact of Phaseless and the
// code that makes and runs them: text features (textfeat), the router
// predictor (predictor), and the built-in language-model engine (lm), plus the
// shipped model files. It imports nothing from agent or cloud.
package models
