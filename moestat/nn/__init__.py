"""Neural-network side of moestat: MoE layers, routers, Soft MoE, training methods and classifiers."""
