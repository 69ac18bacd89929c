"""moestat.estimators subpackage."""
