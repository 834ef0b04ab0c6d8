// Merged into @jupyterlab/builder's configuration (package.json "jupyterlab.webpackConfig").
// Module ids by name, not by a hash of the module's identifier: the container entry's identifier
// holds the absolute path of the sources, so hashed ids made the build differ between checkouts,
// and the committed prebuilt/ output could not be checked against its sources anywhere else.
module.exports = {
  optimization: { moduleIds: 'named' }
};
