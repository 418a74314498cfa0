# SPDX-License-Identifier: MIT
# /// script
# requires-python = ">=3.11"
# dependencies = [
#     "scikit-learn",
# ]
# ///
"""Train and compare two classifiers on a synthetic data set; print a report and the confusion matrix."""
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import classification_report, confusion_matrix, roc_auc_score
from sklearn.model_selection import cross_val_score, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

X, y = make_classification(n_samples=1500, n_features=20, n_informative=8, n_redundant=4,
                           class_sep=1.2, random_state=42)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, stratify=y, random_state=42)

models = {
    "logistic regression": make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)),
    "random forest": RandomForestClassifier(n_estimators=50, max_depth=8, random_state=0, n_jobs=1),
}
scores = {}
for name, clf in models.items():
    cv = cross_val_score(clf, X_train, y_train, cv=3)
    clf.fit(X_train, y_train)
    proba = clf.predict_proba(X_test)[:, 1]
    scores[name] = roc_auc_score(y_test, proba)
    print(f"{name}: cv accuracy {cv.mean():.3f} ± {cv.std():.3f}, test ROC AUC {scores[name]:.3f}")

best = max(scores, key=scores.get)
pred = models[best].predict(X_test)
print(classification_report(y_test, pred, digits=3))
print("confusion matrix:", confusion_matrix(y_test, pred).tolist())
print(f"best model: {best}")
