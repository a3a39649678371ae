// Carrier of the shared precompiled header; intentionally empty.
