"""Model selection: the dendrogram of mixing measures and the criteria DSC, AIC, BIC, ICL."""
